// data/text/wordpiece.cc: Vocab loading and the BERT WordPiece pipeline (see wordpiece.h).
#include "data/text/wordpiece.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <utility>

#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::text {
namespace {

constexpr const char* kInMemorySource = "<in-memory token list>";
constexpr std::string_view kContinuationPrefix = "##";

// The special tokens BERT vocabularies carry. Those present in a vocab are matched in the
// raw text before normalization, like the added_tokens of a tokenizer.json.
constexpr std::string_view kSpecialTokenNames[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

// CJK Unified Ideographs (and extensions A-F) and the compatibility ideographs: the blocks
// Google's BERT pads with spaces. Hangul, Hiragana and Katakana are deliberately absent.
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// BERT's "punctuation": every non-alphanumeric printable ASCII character (so $ + < = > ^ `
// | ~ count even though Unicode calls them symbols), plus Unicode category P*.
bool is_bert_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
           (cp >= 123 && cp <= 126);
  }
  return unicode::is_punctuation_category(cp);
}

// Characters clean-up deletes: NUL, U+FFFD and category C* (Cc Cf Cs Co Cn) except the
// whitespace controls \t \n \r, which become spaces instead.
bool is_removed_by_cleanup(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp < 0x20 || cp == 0x7F) return true;
  if (cp < 0x80) return false;
  return cp == 0xFFFD || unicode::is_other(cp);
}

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return unicode::is_white_space(cp);
}

}  // namespace

// ---- Vocab ---------------------------------------------------------------------------

Vocab Vocab::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error("vocab: ", path, " is a directory, not a vocab file",
                Hint("pass the vocab.txt inside it, e.g. " + path + "/vocab.txt"));
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw Error("vocab: cannot open ", path,
                Hint("check the path; a BERT vocab.txt has one token per line"));
  }
  std::vector<std::string> tokens;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
    tokens.push_back(std::move(line));
  }
  if (file.bad()) {
    throw Error("vocab: read error in ", path, " after ", tokens.size(), " lines",
                Hint("the file may be on a failing disk or still being written"));
  }
  return build(std::move(tokens), path);
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  return build(std::move(tokens), kInMemorySource);
}

Vocab Vocab::build(std::vector<std::string> tokens, const std::string& source) {
  if (tokens.empty()) {
    throw Error("vocab: ", source, " holds no tokens",
                Hint("a BERT vocab.txt has one token per line, e.g. 30522 lines for "
                     "bert-base-uncased; the file may be truncated"));
  }
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error("vocab: ", source, " holds ", tokens.size(), " tokens, more than int32 ids allow");
  }
  Vocab v;
  v.tokens_ = std::move(tokens);
  v.ids_.reserve(v.tokens_.size());
  for (size_t i = 0; i < v.tokens_.size(); ++i) {
    // Last line wins, like HF's load_vocab (`vocab[token] = index` line by line).
    auto [it, inserted] = v.ids_.insert_or_assign(v.tokens_[i], static_cast<int32_t>(i));
    if (!inserted) ++v.duplicate_count_;
    v.max_token_bytes_ = std::max(v.max_token_bytes_, v.tokens_[i].size());
  }
  v.unk_id_ = v.id("[UNK]");
  v.cls_id_ = v.id("[CLS]");
  v.sep_id_ = v.id("[SEP]");
  v.pad_id_ = v.id("[PAD]");
  v.mask_id_ = v.id("[MASK]");
  std::string missing;
  for (auto [name, id] : {std::pair{"[UNK]", v.unk_id_}, std::pair{"[CLS]", v.cls_id_},
                          std::pair{"[SEP]", v.sep_id_}}) {
    if (id < 0) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!missing.empty()) {
    throw Error("vocab: ", source, " (", v.tokens_.size(), " tokens) has no ", missing,
                " line", Hint("BERT needs [UNK], [CLS] and [SEP], each alone on a line with no "
                              "surrounding spaces; is this a BERT WordPiece vocab.txt?"));
  }
  return v;
}

int32_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size()) {
    throw Error("vocab: token id ", id, " is outside [0, ", size(), ")",
                Hint("the ids come from a different vocabulary or are corrupt"));
  }
  return tokens_[static_cast<size_t>(id)];
}

// ---- WordPieceTokenizer ----------------------------------------------------------------

WordPieceTokenizer::WordPieceTokenizer(Vocab vocab, WordPieceOptions options)
    : vocab_(std::move(vocab)),
      options_(options) {
  if (options_.max_input_chars_per_word <= 0) {
    throw Error("WordPieceTokenizer: max_input_chars_per_word is ",
                options_.max_input_chars_per_word, ", must be positive",
                Hint("BERT uses 100"));
  }
  for (std::string_view name : kSpecialTokenNames) {
    int32_t id = vocab_.id(name);
    if (id >= 0) special_tokens_.emplace_back(unicode::decode_utf8(name), id);
  }
}

std::vector<int32_t> WordPieceTokenizer::tokenize(std::string_view text) const {
  const std::u32string cps = unicode::decode_utf8(text, "WordPieceTokenizer input");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 4);
  // Split on special tokens, leftmost-longest match, before any normalization.
  size_t section_start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    const std::pair<std::u32string, int32_t>* match = nullptr;
    if (cps[i] == '[') {
      for (const auto& special : special_tokens_) {
        if (cps.compare(i, special.first.size(), special.first) == 0 &&
            (!match || special.first.size() > match->first.size())) {
          match = &special;
        }
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    tokenize_section(std::u32string_view(cps).substr(section_start, i - section_start), ids);
    ids.push_back(match->second);
    i += match->first.size();
    section_start = i;
  }
  tokenize_section(std::u32string_view(cps).substr(section_start), ids);
  return ids;
}

void bert_pre_tokenize(std::u32string_view section, const WordPieceOptions& options,
                       const std::function<void(std::u32string_view)>& word) {
  // 1. Clean-up, CJK padding and lowercasing, one code point at a time (HF lowercases per
  //    code point, so no Final_Sigma context; see wordpiece.h).
  std::u32string normalized;
  normalized.reserve(section.size() + 8);
  for (char32_t cp : section) {
    if (cp == 0 || is_removed_by_cleanup(cp)) continue;
    if (is_whitespace(cp)) {
      normalized.push_back(' ');
    } else if (options.tokenize_chinese_chars && is_cjk_ideograph(cp)) {
      normalized.push_back(' ');
      normalized.push_back(cp);
      normalized.push_back(' ');
    } else if (options.lowercase) {
      unicode::append_lowercase(cp, normalized);
    } else {
      normalized.push_back(cp);
    }
  }
  // 2. Strip accents: NFD, then drop nonspacing marks (Mn).
  if (options.strip_accents.value_or(options.lowercase)) {
    std::u32string decomposed;
    decomposed.reserve(normalized.size() + 8);
    unicode::append_nfd(normalized, decomposed);
    normalized.clear();
    for (char32_t cp : decomposed) {
      if (cp < 0x300 || unicode::category(cp) != unicode::Category::Mn) normalized.push_back(cp);
    }
  }
  // 3. Pre-tokenize: whitespace separates words, each punctuation character is a word.
  const std::u32string_view text(normalized);
  size_t word_start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t cp = text[i];
    const bool space = is_whitespace(cp);
    if (!space && !is_bert_punctuation(cp)) continue;
    if (i > word_start) word(text.substr(word_start, i - word_start));
    if (!space) word(text.substr(i, 1));
    word_start = i + 1;
  }
  if (text.size() > word_start) word(text.substr(word_start));
}

void WordPieceTokenizer::tokenize_section(std::u32string_view section,
                                          std::vector<int32_t>& ids) const {
  bert_pre_tokenize(section, options_, [&](std::u32string_view w) { tokenize_word(w, ids); });
}

void WordPieceTokenizer::tokenize_word(std::u32string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > static_cast<size_t>(options_.max_input_chars_per_word)) {
    ids.push_back(vocab_.unk_id());
    return;
  }
  // UTF-8 of the word; offsets[k] = byte offset of code point k ([n + 1] entries).
  std::string utf8;
  std::vector<size_t> offsets;
  offsets.reserve(word.size() + 1);
  for (char32_t cp : word) {
    offsets.push_back(utf8.size());
    unicode::append_utf8(cp, utf8);
  }
  offsets.push_back(utf8.size());

  // Greedy longest-match-first: at each start take the longest vocab entry (with "##" after
  // the first piece); if no prefix matches at some start the whole word is [UNK].
  const size_t first_piece = ids.size();
  std::string candidate;
  const size_t n = word.size();
  size_t start = 0;
  while (start < n) {
    const size_t prefix_bytes = start > 0 ? kContinuationPrefix.size() : 0;
    int32_t piece_id = -1;
    size_t end = n;
    for (; end > start; --end) {
      const size_t piece_bytes = offsets[end] - offsets[start];
      if (prefix_bytes + piece_bytes > vocab_.max_token_bytes()) continue;  // cannot match
      std::string_view piece(utf8.data() + offsets[start], piece_bytes);
      if (start > 0) {
        candidate.assign(kContinuationPrefix);
        candidate.append(piece);
        piece = candidate;
      }
      piece_id = vocab_.id(piece);
      if (piece_id >= 0) break;
    }
    if (piece_id < 0) {
      ids.resize(first_piece);
      ids.push_back(vocab_.unk_id());
      return;
    }
    ids.push_back(piece_id);
    start = end;
  }
}

std::vector<std::string> WordPieceTokenizer::tokenize_to_strings(std::string_view text) const {
  std::vector<std::string> pieces;
  for (int32_t id : tokenize(text)) pieces.push_back(vocab_.token(id));
  return pieces;
}

Encoding WordPieceTokenizer::encode(std::string_view a, std::optional<std::string_view> b,
                                    int max_length, Truncation truncation) const {
  std::vector<int32_t> first = tokenize(a);
  std::vector<int32_t> second;
  if (b) second = tokenize(*b);
  const size_t num_special = b ? 3 : 2;
  const size_t total = first.size() + second.size() + num_special;
  if (max_length < 0) {
    throw Error("encode: max_length is ", max_length, Hint("pass 0 for no limit, or e.g. 512"));
  }

  size_t num_truncated = 0;
  const size_t limit = static_cast<size_t>(max_length);
  if (max_length > 0 && total > limit) {
    const size_t to_remove = total - limit;
    auto fail = [&](std::string_view why, std::string_view hint) {
      std::ostringstream lengths;
      lengths << first.size();
      if (b) lengths << " + " << second.size();
      throw Error("encode: ", total, " tokens (", lengths.str(), " + ", num_special,
                  " special) do not fit max_length ", max_length, " with truncation ",
                  why, Hint(std::string(hint)));
    };
    size_t remove_first = 0, remove_second = 0;
    switch (truncation) {
      case Truncation::do_not_truncate:
        fail("do_not_truncate", "raise max_length, shorten the text, or pass "
                                "Truncation::longest_first");
        break;
      case Truncation::longest_first:
        if (!b) {
          // HF keeps at least one token (truncate only if len(ids) > num_tokens_to_remove).
          if (first.size() <= to_remove)
            fail("longest_first", "max_length must leave room for [CLS], [SEP] and a token");
          remove_first = to_remove;
        } else {
          if (first.size() + second.size() < to_remove)
            fail("longest_first", "max_length must be at least 3 for a pair");
          // transformers' truncate_sequences: first even out the lengths, then split the rest
          // in half; the first sequence gives up the smaller half (i.e. keeps the extra token).
          const size_t len_first = first.size(), len_second = second.size();
          const size_t gap = len_first > len_second ? len_first - len_second
                                                    : len_second - len_first;
          const size_t even_out = std::min(gap, to_remove);
          const size_t rest = to_remove - even_out;
          if (len_first > len_second) {
            remove_first = even_out + rest / 2;
            remove_second = rest - rest / 2;
          } else {
            remove_first = rest / 2;
            remove_second = even_out + rest - rest / 2;
          }
        }
        break;
      case Truncation::only_first:
        if (first.size() <= to_remove)
          fail("only_first", "the first sequence would lose every token; use longest_first "
                             "or raise max_length");
        remove_first = to_remove;
        break;
      case Truncation::only_second:
        if (!b)
          fail("only_second", "only_second needs a second text; use longest_first or "
                              "only_first for a single text");
        if (second.size() <= to_remove)
          fail("only_second", "the second sequence would lose every token; use longest_first "
                              "or raise max_length");
        remove_second = to_remove;
        break;
    }
    first.resize(first.size() - remove_first);
    second.resize(second.size() - remove_second);
    num_truncated = remove_first + remove_second;
  }

  Encoding out;
  out.num_truncated = num_truncated;
  out.ids.reserve(first.size() + second.size() + num_special);
  out.ids.push_back(vocab_.cls_id());
  out.ids.insert(out.ids.end(), first.begin(), first.end());
  out.ids.push_back(vocab_.sep_id());
  out.type_ids.assign(out.ids.size(), 0);
  if (b) {
    out.ids.insert(out.ids.end(), second.begin(), second.end());
    out.ids.push_back(vocab_.sep_id());
    out.type_ids.resize(out.ids.size(), 1);
  }
  return out;
}

std::string WordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    const std::string& piece = vocab_.token(id);
    if (piece.size() > kContinuationPrefix.size() && piece.starts_with(kContinuationPrefix)) {
      text.append(piece, kContinuationPrefix.size());
    } else {
      if (!text.empty()) text.push_back(' ');
      text.append(piece);
    }
  }
  return text;
}

}  // namespace unmask::text
