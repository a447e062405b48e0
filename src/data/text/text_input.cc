// data/text/text_input.cc: reading, validating, sentence-splitting and tokenizing text (see
// text_input.h).
#include "data/text/text_input.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

#include "data/text/parallel.h"
#include "data/text/progress.h"
#include "io/file.h"
#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::data {

namespace fs = std::filesystem;

// ---- inputs ---------------------------------------------------------------------------------

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw Error("prepare-text: no input files", Hint("pass --input FILE or --input DIR"));
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    const fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st))
      throw Error("input ", in, " does not exist", Hint("check the path; relative paths start at the current directory"));
    if (!fs::is_directory(st)) {
      files.push_back(in);
      continue;
    }
    std::vector<std::string> found;
    auto it = fs::recursive_directory_iterator(in, fs::directory_options::skip_permission_denied, ec);
    if (ec) throw Error("cannot list directory ", in, ": ", ec.message());
    for (auto end = fs::recursive_directory_iterator(); it != end; it.increment(ec)) {
      if (ec) throw Error("cannot list directory ", in, ": ", ec.message());
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    if (found.empty()) throw Error("input directory ", in, " holds no files");
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// ---- UTF-8 ----------------------------------------------------------------------------------

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char* end = p + s.size();
  while (p < end) {
    // ASCII fast path, 8 bytes at a time.
    if (end - p >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        p += 8;
        continue;
      }
    }
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int len;
    char32_t cp, min;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return false;
    if (end - p < len) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += len;
  }
  return true;
}

namespace {

// The code point starting at s[i] (valid UTF-8 assumed), and its length in bytes.
char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
  n = std::min(n, s.size() - i);
  char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *len = n;
  return cp;
}

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && is_ascii_space(s[b])) ++b;
  while (e > b && is_ascii_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// ---- sentence splitter ----------------------------------------------------------------------

constexpr std::array<std::string_view, 58> kAbbreviations = {
    "mr",  "mrs",  "ms",   "dr",   "prof", "sr",  "jr",   "st",    "mt",   "vs",  "etc",  "cf",
    "al",  "fig",  "figs", "no",   "nos",  "vol", "vols", "ed",    "eds",  "inc", "ltd",  "co",
    "corp", "dept", "est", "approx", "jan", "feb", "mar", "apr",  "jun",  "jul", "aug",  "sep",
    "sept", "oct", "nov",  "dec",  "gen",  "col", "lt",   "capt", "sgt",  "rev", "hon",  "gov",
    "pres", "sen", "rep",  "ca",   "pp",   "ch",  "sec",  "eq",   "viz",  "resp"};

bool is_listed_abbreviation(std::string_view word) {
  if (word.size() > 6) return false;
  char lower[8];
  for (size_t i = 0; i < word.size(); ++i) {
    const char c = word[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) return false;
    lower[i] = char(c | 0x20);
  }
  const std::string_view w(lower, word.size());
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), w) != kAbbreviations.end();
}

bool is_ascii_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// "e.g", "i.e", "U.S", "Ph.D": dot-separated runs of one or two letters.
bool is_dotted_abbreviation(std::string_view word) {
  if (word.find('.') == std::string_view::npos) return false;
  size_t run = 0;
  for (char c : word) {
    if (c == '.') {
      if (run == 0) return false;
      run = 0;
    } else if (is_ascii_letter(c)) {
      if (++run > 2) return false;
    } else {
      return false;
    }
  }
  return run > 0;
}

// Does the word ending just before the '.' at `dot` keep the sentence going?
bool ends_abbreviation(std::string_view text, size_t dot) {
  size_t b = dot;
  while (b > 0 && !is_ascii_space(text[b - 1]) && std::strchr("([{\"'", text[b - 1]) == nullptr) --b;
  const std::string_view word = text.substr(b, dot - b);
  if (word.empty()) return false;
  if (word.size() == 1 && word[0] >= 'A' && word[0] <= 'Z') return true;  // an initial: "J. Smith"
  return is_listed_abbreviation(word) || is_dotted_abbreviation(word);
}

bool is_terminator(char c) { return c == '.' || c == '!' || c == '?'; }

// Closing quotes and brackets that stay with the sentence before them: " ' ) ] } ” ’ ».
size_t closer_length(std::string_view s, size_t i) {
  if (std::strchr("\"')]}", s[i]) != nullptr && s[i] != '\0') return 1;
  for (std::string_view c : {std::string_view("\u201D"), std::string_view("\u2019"), std::string_view("\u00BB")})
    if (s.substr(i, c.size()) == c) return c.size();
  return 0;
}

// Can a sentence start with the character at s[i]?
bool starts_sentence(std::string_view s, size_t i) {
  const char c = s[i];
  if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || std::strchr("\"'([{", c) != nullptr) return true;
  if (static_cast<unsigned char>(c) < 0x80) return false;
  size_t len;
  const char32_t cp = decode_at(s, i, &len);
  if (cp == U'\u201C' || cp == U'\u2018' || cp == U'\u00AB' || cp == U'\u00BF' || cp == U'\u00A1') return true;
  const auto cat = text::unicode::category(cp);
  return cat == text::unicode::Category::Lu || cat == text::unicode::Category::Lt;
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!is_terminator(text[i])) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && is_terminator(text[j])) ++j;
    const bool single_dot = text[i] == '.' && j == i + 1;  // "etc." but not "etc..." or "?!"
    for (size_t c; j < n && (c = closer_length(text, j)) > 0;) j += c;
    size_t k = j;
    while (k < n && (text[k] == ' ' || text[k] == '\t')) ++k;
    const bool split = k > j && k < n && starts_sentence(text, k) && !(single_dot && ends_abbreviation(text, i));
    if (split) {
      if (auto s = trim(text.substr(start, j - start)); !s.empty()) out.push_back(s);
      start = k;
    }
    i = std::max(j, i + 1);
  }
  if (auto s = trim(text.substr(start)); !s.empty()) out.push_back(s);
  return out;
}

// ---- reading and tokenizing -----------------------------------------------------------------

namespace {

enum class LineKind : uint8_t { blank, text, end_of_file };

struct Line {
  LineKind kind;
  std::string_view text;
};

// Tokenizes text, first breaking literal special tokens ("[SEP]" -> "[ SEP]"): '[' is BERT
// punctuation and always its own token, so the extra space changes nothing else.
void tokenize_plain(const text::WordPieceTokenizer& tok, std::string_view s, std::string& buf,
                    std::vector<int32_t>& out) {
  if (s.find('[') == std::string_view::npos) {
    out = tok.tokenize(s);
    return;
  }
  buf.clear();
  for (char c : s) {
    buf += c;
    if (c == '[') buf += ' ';
  }
  out = tok.tokenize(buf);
}

// The tokenized sentences of a run of lines.
struct ChunkResult {
  std::vector<int32_t> tokens;
  std::vector<int64_t> sentence_lengths;
  std::vector<int64_t> sentences_per_line;  // one entry per Line of the chunk (0 for markers)
};

// Scans one file's bytes into lines (appended to `lines`), counting invalid UTF-8, and rejects
// binary or empty files.
void scan_file(const std::string& path, std::string_view bytes, std::vector<Line>& lines, CorpusStats& stats) {
  if (const void* nul = std::memchr(bytes.data(), 0, bytes.size()))
    throw Error("input ", path, " looks binary: NUL byte at offset ", static_cast<const char*>(nul) - bytes.data(),
                Hint("prepare-text reads UTF-8 text; pass text files only"));
  if (bytes.substr(0, 3) == "\xEF\xBB\xBF") bytes.remove_prefix(3);
  int64_t line_no = 0, nonblank = 0, invalid = 0, first_invalid = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t eol = bytes.find('\n', pos);
    if (eol == std::string_view::npos) eol = bytes.size();
    std::string_view line = bytes.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = trim(line);
    if (line.empty()) {
      lines.push_back({LineKind::blank, {}});
      continue;
    }
    ++nonblank;
    if (!is_valid_utf8(line)) {
      if (invalid++ == 0) first_invalid = line_no;
      if (stats.invalid_utf8_lines++ == 0) stats.first_invalid_utf8 = path + ":" + std::to_string(line_no);
      continue;
    }
    lines.push_back({LineKind::text, line});
  }
  stats.lines += line_no;
  if (nonblank == 0) throw Error("input ", path, " is empty (no text)", Hint("remove it from the inputs"));
  if (invalid * 2 > nonblank)
    throw Error("input ", path, " looks binary or is not UTF-8: ", invalid, " of ", nonblank,
                " non-blank lines are invalid UTF-8 (the first at line ", first_invalid, ")",
                Hint("convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8) or leave it out"));
  lines.push_back({LineKind::end_of_file, {}});
}

}  // namespace

Corpus read_corpus(const std::vector<std::string>& files, TextFormat format, const text::WordPieceTokenizer& tokenizer,
                   int num_threads, Progress* progress, CorpusStats& stats) {
  // Text is processed in batches of about 64 MB so a large corpus is not held as text and
  // tokens at once.
  constexpr size_t kBatchBytes = size_t(64) << 20;
  constexpr int64_t kLinesPerChunk = 256;
  Corpus corpus;
  size_t next_file = 0;
  while (next_file < files.size()) {
    std::deque<std::string> texts;  // a deque: Line views into earlier texts stay valid on push_back
    std::vector<Line> lines;
    size_t batch_bytes = 0;
    while (next_file < files.size() && batch_bytes < kBatchBytes) {
      texts.push_back(io::read_file(files[next_file]));
      batch_bytes += texts.back().size();
      scan_file(files[next_file], texts.back(), lines, stats);
      ++stats.files;
      ++next_file;
    }
    const int64_t num_lines = int64_t(lines.size());
    const int64_t num_chunks = (num_lines + kLinesPerChunk - 1) / kLinesPerChunk;
    std::vector<ChunkResult> results(static_cast<size_t>(num_chunks));
    parallel_chunks(num_lines, kLinesPerChunk, num_threads, [&](int64_t begin, int64_t end) {
      ChunkResult& r = results[size_t(begin / kLinesPerChunk)];
      std::string buf;
      std::vector<int32_t> ids;
      int64_t bytes = 0;
      for (int64_t l = begin; l < end; ++l) {
        const Line& line = lines[size_t(l)];
        int64_t count = 0;
        if (line.kind == LineKind::text) {
          bytes += int64_t(line.text.size()) + 1;
          auto add = [&](std::string_view sentence) {
            tokenize_plain(tokenizer, sentence, buf, ids);
            if (ids.empty()) return;
            r.tokens.insert(r.tokens.end(), ids.begin(), ids.end());
            r.sentence_lengths.push_back(int64_t(ids.size()));
            ++count;
          };
          if (format == TextFormat::documents) {
            for (std::string_view s : split_sentences(line.text)) add(s);
          } else {
            add(line.text);
          }
        }
        r.sentences_per_line.push_back(count);
      }
      if (progress) progress->add(bytes);
    });
    // Assemble in line order: the corpus is the same whatever the thread count.
    for (const ChunkResult& r : results) {
      const int32_t* tokens = r.tokens.data();
      size_t s = 0;
      for (size_t l = 0; l < r.sentences_per_line.size(); ++l) {
        const LineKind kind = lines[size_t(&r - results.data()) * kLinesPerChunk + l].kind;
        for (int64_t k = 0; k < r.sentences_per_line[l]; ++k, ++s) {
          corpus.add_sentence(tokens, r.sentence_lengths[s]);
          tokens += r.sentence_lengths[s];
        }
        if (kind != LineKind::text || format == TextFormat::documents) corpus.end_document();
      }
    }
  }
  return corpus;
}

}  // namespace unmask::data
