// data/text/wordpiece.h: BERT's WordPiece tokenizer, id-for-id identical to Hugging Face.
//
//   auto vocab = text::Vocab::load("bert-base-uncased-vocab.txt");
//   text::WordPieceTokenizer tok(std::move(vocab));              // uncased defaults
//   text::Encoding e = tok.encode("Hello, world!", "Second text", /*max_length=*/128);
//   // e.ids      = [CLS] hello , world ! [SEP] second text [SEP]
//   // e.type_ids = 0     0     0 0     0 0     1      1    1
//
// Pipeline (reference/bert.md section 5; matches transformers' BertTokenizer and the Rust
// BertNormalizer + BertPreTokenizer + WordPiece of tokenizer.json):
//   1. split the raw text on the special tokens of the vocab ([PAD] [UNK] [CLS] [SEP] [MASK],
//      exact, case-sensitive, leftmost-longest); they map straight to their ids and are
//      never normalized. "[cls]" is not special and tokenizes as "[", "cl", "##s", "]".
//   2. per remaining section: drop U+0000, U+FFFD and category C* except \t \n \r; map
//      White_Space to ' '; surround CJK ideographs with spaces; lowercase (full, per code
//      point); strip accents (NFD, drop Mn); split on whitespace and punctuation (ASCII
//      33-47, 58-64, 91-96, 123-126 or category P*).
//   3. per word: > max_input_chars_per_word code points -> [UNK]; greedy longest-match-first
//      pieces with "##" continuations; any unmatched position -> the whole word is [UNK].
//
// Known differences from tokenizers.js (@huggingface/transformers 3.x), which otherwise
// matches id for id (tests/js/run_parity.sh): it pads only BMP ideographs (its loop reads
// UTF-16 units, so U+20000.. are not padded), keeps unassigned code points (its control
// regex omits \p{Cn}), and applies Final_Sigma (String.toLowerCase on the whole text, so a
// word-final capital sigma becomes U+03C2, where HF's per-code-point lowercase gives U+03C3).
// Tables are Unicode 15.0 (Debian unicode-data); Node 20.20 (ICU 78) uses Unicode 17.0, so
// code points assigned after 15.0 are unassigned (category Cn, deleted) here. Among code
// points assigned in 15.0, tests/js/unicode_versions.mjs finds one behavioural difference:
// U+1171E AHOM CONSONANT SIGN MEDIAL RA is Mn in 15.0 (stripped when uncased) and Mc in
// 16.0+ (kept). (U+0085 also differs in White_Space, but it is Cc and deleted either way.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace unmask::text {

/// A WordPiece vocabulary: one token per line, id = line index.
class Vocab {
 public:
  /// Reads a vocab.txt. Throws unmask::Error for a missing/unreadable or empty file and for a
  /// vocabulary without [UNK], [CLS] or [SEP]. Duplicate lines keep their own id for
  /// token(id), and id(token) returns the LAST line holding the token, as Hugging Face's
  /// load_vocab (a dict filled line by line) and the Rust WordPiece::read_file do.
  static Vocab load(const std::string& path);
  /// The same validation, for an in-memory token list.
  static Vocab from_tokens(std::vector<std::string> tokens);

  /// Id of token, or -1 if the vocabulary does not hold it.
  int32_t id(std::string_view token) const;
  /// Token of id; throws unmask::Error if id is outside [0, size()).
  const std::string& token(int32_t id) const;
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  /// Number of lines that repeat an earlier token (0 for bert-base-uncased).
  int32_t duplicate_count() const { return duplicate_count_; }
  /// Length in bytes of the longest token (bounds the WordPiece search).
  size_t max_token_bytes() const { return max_token_bytes_; }

  int32_t unk_id() const { return unk_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }    // -1 if the vocab has no [PAD]
  int32_t mask_id() const { return mask_id_; }  // -1 if the vocab has no [MASK]

 private:
  static Vocab build(std::vector<std::string> tokens, const std::string& source);

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;                                            // [V]
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;  // token -> id
  int32_t duplicate_count_ = 0;
  size_t max_token_bytes_ = 0;
  int32_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, mask_id_ = -1;
};

struct WordPieceOptions {
  bool lowercase = true;
  /// nullopt = follow `lowercase` (uncased strips accents, cased keeps them), as HF's
  /// strip_accents=None; false keeps accents even when lowercasing.
  std::optional<bool> strip_accents;
  bool tokenize_chinese_chars = true;
  /// Words longer than this many code points become [UNK].
  int max_input_chars_per_word = 100;
};

/// BERT's normalizer and pre-tokenizer, what tokenize() runs before WordPiece: clean-up, CJK
/// spacing, lowercasing and accent stripping as `options` say, then splitting at whitespace and
/// punctuation. Calls `word` with each pre-token (special tokens are not split out here).
void bert_pre_tokenize(std::u32string_view text, const WordPieceOptions& options,
                       const std::function<void(std::u32string_view)>& word);

/// How encode() shortens a text (pair) that does not fit max_length.
enum class Truncation {
  longest_first,   // HF: trim the longer sequence down to the shorter, then alternate
                   // (first sequence keeps the extra token when the remainder is odd)
  only_first,      // trim A only; throws if A would have to lose every token
  only_second,     // trim B only; throws if there is no B or B would lose every token
  do_not_truncate  // throw if it does not fit
};

struct Encoding {
  std::vector<int32_t> ids;       // [T] token ids, specials included
  std::vector<int32_t> type_ids;  // [T] 0 for [CLS] A [SEP], 1 for B [SEP]
  size_t num_truncated = 0;       // tokens removed from A and B to fit max_length
};

class WordPieceTokenizer {
 public:
  explicit WordPieceTokenizer(Vocab vocab, WordPieceOptions options = {});

  const Vocab& vocab() const { return vocab_; }
  const WordPieceOptions& options() const { return options_; }

  /// Text -> word-piece ids without [CLS]/[SEP] framing (special tokens written in the text
  /// keep their ids). Throws unmask::Error on invalid UTF-8, naming the byte offset.
  std::vector<int32_t> tokenize(std::string_view text) const;
  std::vector<std::string> tokenize_to_strings(std::string_view text) const;

  /// [CLS] A [SEP] or [CLS] A [SEP] B [SEP]. max_length counts the special tokens; 0 means no
  /// limit. See Truncation for the strategies; every impossible fit throws unmask::Error
  /// with the lengths and the limit.
  Encoding encode(std::string_view a, std::optional<std::string_view> b = std::nullopt,
                  int max_length = 0, Truncation truncation = Truncation::longest_first) const;

  /// Joins the tokens of ids for printing: "##" pieces glued to the previous token, the
  /// others separated by one space. Throws on an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  // Appends the ids of one special-token-free section of the input.
  void tokenize_section(std::u32string_view section, std::vector<int32_t>& ids) const;
  // Appends the pieces of one pre-tokenized word (code points), or [UNK].
  void tokenize_word(std::u32string_view word, std::vector<int32_t>& ids) const;

  Vocab vocab_;
  WordPieceOptions options_;
  std::vector<std::pair<std::u32string, int32_t>> special_tokens_;  // in the text, kept whole
};

}  // namespace unmask::text
