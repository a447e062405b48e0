// WordPiece tokenizer tests: unit cases, then id-for-id parity with tokenizers.js.
//
// Parity references (tests/js/expected_*.txt) are committed; tests/js/run_parity.sh
// regenerates them with tokenizers.js and reruns WordPieceParity.* against the fresh copies
// (UNMASK_PARITY_DIR overrides where the references are read from).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "data/text/unicode.h"
#include "data/text/vocab_trainer.h"
#include "data/text/wordpiece.h"
#include "unmask/error.h"

namespace {

using unmask::Error;
using unmask::text::Encoding;
using unmask::text::Truncation;
using unmask::text::Vocab;
using unmask::text::WordPieceOptions;
using unmask::text::WordPieceTokenizer;
using Strings = std::vector<std::string>;

#ifndef UNMASK_SOURCE_DIR
#define UNMASK_SOURCE_DIR "."
#endif
const std::string kSourceDir = UNMASK_SOURCE_DIR;
// UNMASK_PARITY_VOCAB: another vocabulary for WordPieceParity.* (run_parity.sh passes the one
// `unmask train-vocab` trained, with references tokenizers.js made on it).
const std::string kVocabPath = std::getenv("UNMASK_PARITY_VOCAB") && *std::getenv("UNMASK_PARITY_VOCAB")
                                   ? std::string(std::getenv("UNMASK_PARITY_VOCAB"))
                                   : kSourceDir + "/data/bert-base-uncased-vocab.txt";

// The real vocab (kept in the repository) is needed for the parity and most unit tests.
#define REQUIRE_REAL_VOCAB() \
  ASSERT_TRUE(std::filesystem::exists(kVocabPath)) << kVocabPath << " not found (it is part of the repository)"

const WordPieceTokenizer& uncased() {
  static const WordPieceTokenizer tokenizer(Vocab::load(kVocabPath));
  return tokenizer;
}

const WordPieceTokenizer& cased() {
  static const WordPieceTokenizer tokenizer(Vocab::load(kVocabPath),
                                            WordPieceOptions{.lowercase = false, .strip_accents = std::nullopt});
  return tokenizer;
}

// A tiny vocabulary for truncation and error tests: ids are easy to read.
Vocab tiny_vocab() {
  return Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d",
                             "e", "##s", "un", "##aff", "##able", ",", "!"});
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error thrown>";
}

// ---- Vocab ------------------------------------------------------------------------------

TEST(WordPieceVocab, LoadsBertBaseUncased) {
  REQUIRE_REAL_VOCAB();
  const Vocab& v = uncased().vocab();
  EXPECT_EQ(v.size(), 30522);
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.unk_id(), 100);
  EXPECT_EQ(v.cls_id(), 101);
  EXPECT_EQ(v.sep_id(), 102);
  EXPECT_EQ(v.mask_id(), 103);
  EXPECT_EQ(v.token(1996), "the");
  EXPECT_EQ(v.id("the"), 1996);
  EXPECT_EQ(v.id("no-such-token"), -1);
  EXPECT_EQ(v.duplicate_count(), 0);
  EXPECT_THROW(v.token(30522), Error);
  EXPECT_THROW(v.token(-1), Error);
}

TEST(WordPieceVocab, MissingFileNamesThePath) {
  std::string msg = error_message([] { Vocab::load("/nonexistent/vocab.txt"); });
  EXPECT_NE(msg.find("/nonexistent/vocab.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint"), std::string::npos) << msg;
}

TEST(WordPieceVocab, DirectoryIsAnError) {
  std::string msg = error_message([] { Vocab::load(testing::TempDir()); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

TEST(WordPieceVocab, EmptyFileIsAnError) {
  const std::string path = testing::TempDir() + "/unmask_empty_vocab.txt";
  std::ofstream(path).close();
  std::string msg = error_message([&] { Vocab::load(path); });
  EXPECT_NE(msg.find("no tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  std::remove(path.c_str());
}

TEST(WordPieceVocab, MissingSpecialTokensAreNamed) {
  const std::string path = testing::TempDir() + "/unmask_nospecial_vocab.txt";
  std::ofstream(path) << "[PAD]\n[UNK]\nhello\n";
  std::string msg = error_message([&] { Vocab::load(path); });
  EXPECT_NE(msg.find("[CLS], [SEP]"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[UNK]"), msg.find("[UNK], [CLS]")) << "only missing tokens are named";
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint"), std::string::npos) << msg;
  std::remove(path.c_str());

  msg = error_message([] { Vocab::from_tokens({"[CLS]", "[SEP]", "x"}); });
  EXPECT_NE(msg.find("has no [UNK] line"), std::string::npos) << msg;
}

TEST(WordPieceVocab, DuplicatesResolveToTheLastLineLikeHuggingFace) {
  Vocab v = Vocab::from_tokens({"[UNK]", "[CLS]", "[SEP]", "dup", "x", "dup", "\r"});
  EXPECT_EQ(v.size(), 7);
  EXPECT_EQ(v.id("dup"), 5);  // transformers' load_vocab: vocab[token] = index, line by line
  EXPECT_EQ(v.token(3), "dup");
  EXPECT_EQ(v.duplicate_count(), 1);
  EXPECT_EQ(v.pad_id(), -1);
  EXPECT_EQ(v.mask_id(), -1);
}

TEST(WordPieceVocab, CrlfLinesAreTrimmed) {
  const std::string path = testing::TempDir() + "/unmask_crlf_vocab.txt";
  std::ofstream(path, std::ios::binary) << "[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n";
  Vocab v = Vocab::load(path);
  EXPECT_EQ(v.id("hello"), 3);
  EXPECT_EQ(v.size(), 4);
  std::remove(path.c_str());
}

// ---- Tokenization -------------------------------------------------------------------------

TEST(WordPiece, BasicSentence) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings("Hello, World! UNAFFABLE"),
            (Strings{"hello", ",", "world", "!", "una", "##ffa", "##ble"}));
  EXPECT_EQ(uncased().tokenize("the"), (std::vector<int32_t>{1996}));
  EXPECT_TRUE(uncased().tokenize("").empty());
  EXPECT_TRUE(uncased().tokenize(" \t\r\n\u00A0").empty());
}

TEST(WordPiece, UnmatchableWordIsOneUnk) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings("hi\xF0\x9F\x98\x80"), (Strings{"[UNK]"}));  // hi😀
  EXPECT_EQ(uncased().tokenize_to_strings("hi \xF0\x9F\x98\x80"), (Strings{"hi", "[UNK]"}));
}

TEST(WordPiece, AccentsStrippedWhenUncasedKeptWhenCased) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings("Café naïve"), (Strings{"cafe", "naive"}));
  // Precomposed and combining spellings agree after NFD.
  EXPECT_EQ(uncased().tokenize("cafe\xCC\x81"), uncased().tokenize("café"));
  // Cased (strip_accents follows lowercase=false): é stays, so "café" is not "cafe".
  EXPECT_NE(cased().tokenize("café"), cased().tokenize("cafe"));
  // lowercase with strip_accents=false keeps accents.
  WordPieceTokenizer keep(Vocab::load(kVocabPath), {.lowercase = true, .strip_accents = false});
  EXPECT_EQ(keep.tokenize("Café"), cased().tokenize("café"));
  // U+0130 lowercases to "i" + U+0307 (a length change); stripping leaves "i".
  EXPECT_EQ(uncased().tokenize_to_strings("\xC4\xB0stanbul"), (Strings{"istanbul"}));
}

TEST(WordPiece, CjkIdeographsAreSplitHangulIsNot) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings("中文ab"), (Strings{"中", "文", "ab"}));
  // Hangul syllables decompose to jamo (NFD) and stay one word.
  Strings korean = uncased().tokenize_to_strings("한국");
  EXPECT_EQ(korean.front(), "ᄒ");
  EXPECT_TRUE(korean.size() > 2 && korean[1].starts_with("##")) << korean.size();
  WordPieceTokenizer no_cjk(Vocab::load(kVocabPath), {.lowercase = true, .strip_accents = std::nullopt, .tokenize_chinese_chars = false});
  EXPECT_EQ(no_cjk.tokenize_to_strings("中文"), (Strings{"中", "##文"}));
}

TEST(WordPiece, WordsOverTheLimitBecomeUnk) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings(std::string(101, 'a')), (Strings{"[UNK]"}));
  Strings hundred = uncased().tokenize_to_strings(std::string(100, 'a'));
  EXPECT_GT(hundred.size(), 1u);
  EXPECT_NE(hundred.front(), "[UNK]");
  // The limit counts code points after normalization: 100 x "é" (2 bytes each) is fine.
  std::string accented;
  for (int i = 0; i < 100; ++i) accented += "é";
  EXPECT_NE(uncased().tokenize_to_strings(accented).front(), "[UNK]");
}

TEST(WordPiece, CleanupDeletesControlsAndFormatCharacters) {
  REQUIRE_REAL_VOCAB();
  // U+200B (Cf) and U+00AD soft hyphen (Cf) are deleted and glue their neighbours.
  EXPECT_EQ(uncased().tokenize("ab\u200Bout"), uncased().tokenize("about"));
  EXPECT_EQ(uncased().tokenize("soft\u00ADware"), uncased().tokenize("software"));
  EXPECT_EQ(uncased().tokenize(std::string("a\0b", 3)), uncased().tokenize("ab"));
  EXPECT_EQ(uncased().tokenize("a\x01" "b"), uncased().tokenize("ab"));
  // NBSP and ideographic space separate words.
  EXPECT_EQ(uncased().tokenize("hello\u00A0world\u3000again"),
            uncased().tokenize("hello world again"));
}

TEST(WordPiece, SpecialTokensInTextAreKeptWhole) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize("[MASK]"), (std::vector<int32_t>{103}));
  EXPECT_EQ(uncased().tokenize_to_strings("Paris is the [MASK] of France."),
            (Strings{"paris", "is", "the", "[MASK]", "of", "france", "."}));
  EXPECT_EQ(uncased().tokenize_to_strings("a[SEP]b"), (Strings{"a", "[SEP]", "b"}));
  // Lowercase "[cls]" is not special: it is punctuation and word pieces.
  EXPECT_EQ(uncased().tokenize_to_strings("[cls]"), (Strings{"[", "cl", "##s", "]"}));
}

TEST(WordPiece, PunctuationSplitsAsciiSymbolsButNotUnicodeSymbols) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().tokenize_to_strings("a$b"), (Strings{"a", "$", "b"}));
  EXPECT_EQ(uncased().tokenize_to_strings("«a»"), (Strings{"«", "a", "»"}));
  // € is a symbol (Sc), not punctuation: it stays inside the word.
  EXPECT_EQ(uncased().tokenize_to_strings("a€"), (Strings{"a", "##€"}));
  EXPECT_EQ(uncased().tokenize_to_strings("a☃b"), (Strings{"[UNK]"}));  // ☃ (So) not in vocab
}

TEST(WordPiece, InvalidUtf8NamesTheByteOffset) {
  Vocab v = tiny_vocab();
  WordPieceTokenizer tok(v);
  std::string msg = error_message([&] { tok.tokenize("abc\xC3(def"); });
  EXPECT_NE(msg.find("byte offset 3"), std::string::npos) << msg;
  msg = error_message([&] { tok.tokenize("ab\xED\xA0\x80"); });  // a UTF-16 surrogate
  EXPECT_NE(msg.find("byte offset 2"), std::string::npos) << msg;
  msg = error_message([&] { tok.tokenize("\xE2\x82"); });  // cut off
  EXPECT_NE(msg.find("byte offset 0"), std::string::npos) << msg;
  msg = error_message([&] { tok.tokenize("ok \xC0\xAF"); });  // overlong '/'
  EXPECT_NE(msg.find("byte offset 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("hint"), std::string::npos) << msg;
}

TEST(WordPiece, DecodeGluesContinuationPieces) {
  REQUIRE_REAL_VOCAB();
  EXPECT_EQ(uncased().decode(uncased().tokenize("Unaffable people")), "unaffable people");
  EXPECT_THROW(uncased().decode({-5}), Error);
}

// ---- Encoding and truncation ---------------------------------------------------------------

// With tiny_vocab(), "a b c" tokenizes to ids 5 6 7; [CLS] = 2, [SEP] = 3.
TEST(WordPieceEncode, SingleAndPairFraming) {
  WordPieceTokenizer tok(tiny_vocab());
  Encoding e = tok.encode("a b");
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 5, 6, 3}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 0, 0, 0}));
  e = tok.encode("a b", "c");
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 5, 6, 3, 7, 3}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(e.num_truncated, 0u);
  e = tok.encode("", "");
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 3, 3}));
}

// Lengths of A and B after encode(A, B, max_length, t), from the type ids.
std::pair<int, int> pair_lengths(const WordPieceTokenizer& tok, int len_a, int len_b,
                                 int max_length, Truncation t = Truncation::longest_first) {
  std::string a, b;
  for (int i = 0; i < len_a; ++i) a += "a ";
  for (int i = 0; i < len_b; ++i) b += "b ";
  Encoding e = tok.encode(a, b, max_length, t);
  int ones = 0;
  for (int32_t type : e.type_ids) ones += type;
  EXPECT_EQ(e.num_truncated, static_cast<size_t>(len_a + len_b - (int(e.ids.size()) - 3)));
  EXPECT_LE(static_cast<int>(e.ids.size()), max_length);
  return {static_cast<int>(e.ids.size()) - ones - 2, ones - 1};
}

TEST(WordPieceEncode, LongestFirstMatchesTransformers) {
  WordPieceTokenizer tok(tiny_vocab());
  using P = std::pair<int, int>;
  // Longer side is trimmed down to the shorter first.
  EXPECT_EQ(pair_lengths(tok, 10, 3, 13), P(7, 3));
  EXPECT_EQ(pair_lengths(tok, 3, 10, 13), P(3, 7));
  // Then the remainder is split; the first sequence keeps the odd token (transformers'
  // truncate_sequences: ids_to_move = rest // 2, pair_ids_to_move = rest - rest // 2).
  EXPECT_EQ(pair_lengths(tok, 10, 20, 18), P(8, 7));
  EXPECT_EQ(pair_lengths(tok, 20, 10, 18), P(8, 7));
  EXPECT_EQ(pair_lengths(tok, 10, 10, 18), P(8, 7));
  EXPECT_EQ(pair_lengths(tok, 10, 10, 17), P(7, 7));
  EXPECT_EQ(pair_lengths(tok, 5, 5, 3), P(0, 0));
  // Fits: untouched.
  EXPECT_EQ(pair_lengths(tok, 4, 5, 12), P(4, 5));
  // Single sequence: trimmed from the end, [SEP] kept.
  Encoding e = tok.encode("a b c d e", std::nullopt, 5);
  EXPECT_EQ(e.ids, (std::vector<int32_t>{2, 5, 6, 7, 3}));
  EXPECT_EQ(e.num_truncated, 2u);
}

TEST(WordPieceEncode, OnlyFirstAndOnlySecond) {
  WordPieceTokenizer tok(tiny_vocab());
  using P = std::pair<int, int>;
  EXPECT_EQ(pair_lengths(tok, 10, 4, 12, Truncation::only_first), P(5, 4));
  EXPECT_EQ(pair_lengths(tok, 4, 10, 12, Truncation::only_second), P(4, 5));
  std::string msg = error_message([&] { pair_lengths(tok, 2, 10, 8, Truncation::only_first); });
  EXPECT_NE(msg.find("only_first"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_length 8"), std::string::npos) << msg;
  msg = error_message([&] { tok.encode("a b c d", std::nullopt, 4, Truncation::only_second); });
  EXPECT_NE(msg.find("needs a second text"), std::string::npos) << msg;
}

TEST(WordPieceEncode, DoNotTruncateThrowsWithLengthAndLimit) {
  WordPieceTokenizer tok(tiny_vocab());
  EXPECT_EQ(tok.encode("a b", "c", 6, Truncation::do_not_truncate).ids.size(), 6u);
  std::string msg =
      error_message([&] { tok.encode("a b c", "d e", 6, Truncation::do_not_truncate); });
  EXPECT_NE(msg.find("8 tokens (3 + 2 + 3 special)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("max_length 6"), std::string::npos) << msg;
  msg = error_message([&] { tok.encode("a", std::nullopt, 1); });
  EXPECT_NE(msg.find("max_length 1"), std::string::npos) << msg;
}

TEST(WordPieceEncode, RealVocabPair) {
  REQUIRE_REAL_VOCAB();
  Encoding e = uncased().encode("Hello world", "How are you?");
  EXPECT_EQ(e.ids, (std::vector<int32_t>{101, 7592, 2088, 102, 2129, 2024, 2017, 1029, 102}));
  EXPECT_EQ(e.type_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1, 1}));
}

// ---- Unicode tables ------------------------------------------------------------------------

TEST(WordPieceUnicode, TablesSpotChecks) {
  namespace u = unmask::text::unicode;
  EXPECT_STREQ(u::version(), "15.0.0");
  EXPECT_EQ(u::category(U'A'), u::Category::Lu);
  EXPECT_EQ(u::category(0x0301), u::Category::Mn);
  EXPECT_EQ(u::category(0x200B), u::Category::Cf);
  EXPECT_EQ(u::category(0x0378), u::Category::Cn);
  EXPECT_EQ(u::category(0x10FFFF), u::Category::Cn);
  EXPECT_EQ(u::category(0x4E00), u::Category::Lo);
  EXPECT_EQ(u::category(0xE000), u::Category::Co);
  EXPECT_TRUE(u::is_punctuation_category(0x00BF));  // ¿
  EXPECT_TRUE(u::is_white_space(0x3000));
  EXPECT_FALSE(u::is_white_space(0x200B));
  std::u32string lower;
  u::append_lowercase(0x0130, lower);
  u::append_lowercase(0x03A3, lower);
  u::append_lowercase(0x0100, lower);
  u::append_lowercase(0x0101, lower);
  u::append_lowercase(0x10400, lower);
  EXPECT_EQ(lower, (std::u32string{0x69, 0x307, 0x3C3, 0x101, 0x101, 0x10428}));
  std::u32string nfd;
  u::append_nfd(U"\u00E9\uAC01\u1E69\u0071\u0307\u0323", nfd);
  EXPECT_EQ(nfd, (std::u32string{0x65, 0x301, 0x1100, 0x1161, 0x11A8, 0x73, 0x323, 0x307, 0x71,
                                 0x323, 0x307}));
}

// ---- Parity with tokenizers.js --------------------------------------------------------------

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

std::string join(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? " " : "") << ids[i];
  return os.str();
}

std::string parity_dir() {
  const char* dir = std::getenv("UNMASK_PARITY_DIR");
  return dir && *dir ? dir : kSourceDir + "/tests/js";
}

void check_parity(const WordPieceTokenizer& tok, const std::string& expected_file) {
  const auto corpus = read_lines(kSourceDir + "/tests/js/corpus.txt");
  const auto expected = read_lines(parity_dir() + "/" + expected_file);
  ASSERT_GE(corpus.size(), 1000u);
  ASSERT_EQ(corpus.size(), expected.size()) << expected_file << " is stale; rerun run_parity.sh";
  size_t matched = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    std::string got = join(tok.encode(corpus[i]).ids);
    if (got == expected[i]) {
      ++matched;
    } else {
      ADD_FAILURE() << expected_file << " line " << i + 1 << "\n  text:     " << corpus[i]
                    << "\n  expected: " << expected[i] << "\n  got:      " << got;
    }
  }
  std::printf("[ parity   ] %s: %zu / %zu lines match tokenizers.js\n", expected_file.c_str(),
              matched, corpus.size());
  EXPECT_EQ(matched, corpus.size());
}

TEST(WordPieceParity, UncasedMatchesTokenizersJs) {
  REQUIRE_REAL_VOCAB();
  check_parity(uncased(), "expected_uncased.txt");
}

TEST(WordPieceParity, CasedMatchesTokenizersJs) {
  REQUIRE_REAL_VOCAB();
  check_parity(cased(), "expected_cased.txt");
}

TEST(WordPieceParity, PairsWithTypeIdsMatchTokenizersJs) {
  REQUIRE_REAL_VOCAB();
  const auto corpus = read_lines(kSourceDir + "/tests/js/corpus.txt");
  const auto expected = read_lines(parity_dir() + "/expected_pairs_uncased.txt");
  ASSERT_EQ(corpus.size() / 2, expected.size());
  size_t matched = 0;
  for (size_t k = 0; k < expected.size(); ++k) {
    Encoding e = uncased().encode(corpus[2 * k], corpus[2 * k + 1]);
    std::string got = join(e.ids) + "\t" + join(e.type_ids);
    if (got == expected[k]) {
      ++matched;
    } else {
      ADD_FAILURE() << "pair " << k + 1 << " (corpus lines " << 2 * k + 1 << ", " << 2 * k + 2
                    << ")\n  expected: " << expected[k] << "\n  got:      " << got;
    }
  }
  std::printf("[ parity   ] expected_pairs_uncased.txt: %zu / %zu pairs match tokenizers.js\n",
              matched, expected.size());
  EXPECT_EQ(matched, expected.size());
}

}  // namespace

// ---- the vocabulary trainer (text/vocab_trainer.h), on corpora small enough to follow by hand --

namespace {
std::string write_corpus(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}
}  // namespace

// "aab" x3, "ab" x2: alphabet a (8), b (5); continuations ##a, ##b as the sorted words need them;
// pairs (a,##a) 3 and (##a,##b) 3 tie -> the smaller ids first: "aa"; then (aa,##b) 3: "aab";
// then (a,##b) 2: "ab". min_frequency 3 stops before "ab".
TEST(VocabTrainer, MergesByCountThenSmallerPairHandWorked) {
  using unmask::text::train_wordpiece_vocab;
  using unmask::text::VocabTrainerOptions;
  const std::string corpus = write_corpus("unmask_vocab_trainer_1.txt", "aab AAB aab\nab ab\n");
  VocabTrainerOptions o;
  o.vocab_size = 100;
  auto r = train_wordpiece_vocab({corpus}, o);
  EXPECT_EQ(r.vocab, (Strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##a", "##b", "aa", "aab", "ab"}));
  EXPECT_EQ(r.words, 5);
  EXPECT_EQ(r.unique_words, 2);
  EXPECT_EQ(r.merges, 3);
  o.min_frequency = 3;
  r = train_wordpiece_vocab({corpus}, o);
  EXPECT_EQ(r.vocab.back(), "aab");
  EXPECT_TRUE(r.stopped_by_min_frequency);
  o.min_frequency = 2;
  o.vocab_size = 10;  // the limit stops after the first merge
  EXPECT_EQ(train_wordpiece_vocab({corpus}, o).vocab.back(), "aa");
  // limit_alphabet 1 keeps 'a' only: b leaves the words; "aab" -> a ##a, "ab" -> a.
  o.vocab_size = 100, o.limit_alphabet = 1;
  r = train_wordpiece_vocab({corpus}, o);
  EXPECT_EQ(r.vocab, (Strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##a", "aa"}));
  EXPECT_EQ(r.dropped_characters, 1);
  // Cased: "AAB" is its own word with its own alphabet.
  o.limit_alphabet = 1000, o.normalizer.lowercase = false;
  r = train_wordpiece_vocab({corpus}, o);
  EXPECT_NE(std::find(r.vocab.begin(), r.vocab.end(), "A"), r.vocab.end());
  // A merged vocabulary tokenizes its corpus words whole.
  o.normalizer.lowercase = true;
  const WordPieceTokenizer tok(Vocab::from_tokens(train_wordpiece_vocab({corpus}, o).vocab));
  EXPECT_EQ(tok.tokenize_to_strings("AAB ab aabab"), (Strings{"aab", "ab", "aab", "##a", "##b"}));  // no "##ab" merge
  // Bad input: named.
  const std::string bad = write_corpus("unmask_vocab_trainer_2.txt", "ok\nbad \xff byte\n");
  try {
    train_wordpiece_vocab({bad}, VocabTrainerOptions{});
    ADD_FAILURE() << "invalid UTF-8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unmask_vocab_trainer_2.txt:2"), std::string::npos) << e.what();
  }
}
