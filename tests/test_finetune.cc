// Fine-tuning data and metrics: SQuAD v1.1 (features, decoding, official EM/F1), GLUE-style TSV
// classification, CoNLL token classification (conlleval chunks), batching. Every expected number
// is worked out by hand in a comment next to it, following the rules of run_squad.py,
// evaluate-v1.1.py and conlleval.pl (see src/data/text/{squad,glue,conll}.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "models/bert/finetune_batch.h"
#include "data/text/conll.h"
#include "models/bert/finetune.h"
#include "data/text/glue.h"
#include "data/text/squad.h"
#include "op_test_util.h"
#include "data/text/unicode.h"
#include "data/text/wordpiece.h"
#include "unmask/context.h"
#include "unmask/error.h"
#include "unmask/train.h"
#include "error_test_util.h"

namespace {

using namespace unmask::finetune;
using unmask::Error;
using unmask::text::Vocab;
using unmask::text::WordPieceTokenizer;
using Strings = std::vector<std::string>;

// A small uncased vocabulary holding every piece the examples below need.
WordPieceTokenizer tiny_tokenizer() {
  Strings tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "steve", "smith", "'", "s", "dog", "(",
                    ")", "-", "1895", "1943", "was", "quick", ".", "when", "the", "born", "q", "jump", "##ed", "##s",
                    "new", "york", "city", "is", "big", "small", "good", "bad", "movie", "a"};
  for (int i = 0; i < 10; ++i) tokens.push_back("w" + std::to_string(i));
  return WordPieceTokenizer(Vocab::from_tokens(tokens));
}

using unmask::test::error_of;

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() / ("unmask_ft_" + name)).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// ---- SQuAD metrics (evaluate-v1.1.py) -----------------------------------------------------------

TEST(FinetuneSquadMetrics, NormalizeAnswer) {
  EXPECT_EQ(squad_normalize_answer("The Cat!"), "cat");
  EXPECT_EQ(squad_normalize_answer("an apple a day"), "apple day");
  EXPECT_EQ(squad_normalize_answer("theater"), "theater");              // "the" only as a whole word
  EXPECT_EQ(squad_normalize_answer("Hello,world"), "helloworld");       // punctuation removed, no space
  EXPECT_EQ(squad_normalize_answer("a-an-the"), "aanthe");              // punctuation goes first
  EXPECT_EQ(squad_normalize_answer("  \xC3\x9C" "ber  the\tTop "), "\xC3\xBC" "ber top");  // Unicode lowercase
  EXPECT_EQ(squad_normalize_answer("the"), "");
}

TEST(FinetuneSquadMetrics, ExactMatchAndF1ByHand) {
  EXPECT_EQ(squad_exact_match("The Cat!", "cat"), 1.0);
  EXPECT_EQ(squad_exact_match("cats", "cat"), 0.0);
  // [quick brown fox] vs [quick fox jumps]: 2 common, P = R = 2/3, F1 = 2/3.
  EXPECT_NEAR(squad_f1("the quick brown fox", "quick fox jumps"), 2.0 / 3.0, 1e-12);
  // Multiset overlap: [x x y] & [x y y] = {x, y}: 2 common, P = R = 2/3.
  EXPECT_NEAR(squad_f1("x x y", "x y y"), 2.0 / 3.0, 1e-12);
  // [new york city] vs [new york]: P = 2/3, R = 1, F1 = 2 (2/3) / (5/3) = 0.8.
  EXPECT_NEAR(squad_f1("New York City", "New York"), 0.8, 1e-12);
  EXPECT_EQ(squad_f1("theater", "the ater"), 0.0);  // [theater] vs [ater]
  EXPECT_EQ(squad_f1("", "cat"), 0.0);
}

TEST(FinetuneSquadMetrics, EvaluateTakesMaxOverTruthsAndCountsUnanswered) {
  std::vector<SquadExample> ex(3);
  ex[0].id = "q1";
  ex[0].answers = {{"Denver Broncos", 0}, {"the Broncos", 0}};
  ex[1].id = "q2";
  ex[1].answers = {{"New York", 0}};
  ex[2].id = "q3";  // no prediction: counts as 0
  ex[2].answers = {{"x", 0}};
  std::map<std::string, std::string> pred = {{"q1", "Broncos"}, {"q2", "New York City"}};
  const SquadScore s = squad_evaluate(ex, pred);
  // q1: EM 1 (vs "the Broncos"), F1 1; q2: EM 0, F1 0.8; q3: 0.  EM = 100/3, F1 = 180/3 = 60.
  EXPECT_EQ(s.total, 3);
  EXPECT_EQ(s.unanswered, 1);
  EXPECT_NEAR(s.exact_match, 100.0 / 3.0, 1e-9);
  EXPECT_NEAR(s.f1, 60.0, 1e-9);
  EXPECT_EQ(squad_predictions_json({{"b", "x\"y"}, {"a", "z"}}), "{\n  \"a\": \"z\",\n  \"b\": \"x\\\"y\"\n}\n");
}

// ---- SQuAD examples and features ------------------------------------------------------------------

// "Café " is 5 code points but 6 bytes: answer_start counts code points.
const char* kContext = "Caf\xC3\xA9 Steve Smith's dog (1895-1943) was quick.";

std::string one_question_json(const std::string& context, const std::string& answer, int64_t start) {
  std::string ctx;
  for (char c : context) {
    if (c == '"' || c == '\\') ctx += '\\';
    ctx += c;
  }
  return "{\"version\": \"1.1\", \"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": \"" + ctx +
         "\", \"qas\": [{\"id\": \"id1\", \"question\": \"When was the dog born\", \"answers\": [{\"text\": \"" + answer +
         "\", \"answer_start\": " + std::to_string(start) + "}]}]}]}]}";
}

TEST(FinetuneSquad, SplitWordsMapsCodePoints) {
  const SquadWords w = squad_split_words(" a\tbc\xC3\xA9  d\n");
  EXPECT_EQ(w.words, (Strings{"a", "bc\xC3\xA9", "d"}));
  // code points: ' ' a \t b c é ' ' ' ' d \n  -> words -1 0 0 1 1 1 1 1 2 2
  EXPECT_EQ(w.char_to_word, (std::vector<int64_t>{-1, 0, 0, 1, 1, 1, 1, 1, 2, 2}));
}

TEST(FinetuneSquad, FeatureImprovesAnswerSpanAndCountsCodePoints) {
  const WordPieceTokenizer tok = tiny_tokenizer();
  SquadReadReport report;
  auto ex = parse_squad(one_question_json(kContext, "1895", 24), "t.json", true, &report);
  ASSERT_EQ(ex.size(), 1u) << (report.warnings.empty() ? "" : report.warnings[0]);
  EXPECT_EQ(ex[0].doc_words, (Strings{"Caf\xC3\xA9", "Steve", "Smith's", "dog", "(1895-1943)", "was", "quick."}));
  EXPECT_EQ(ex[0].start_word, 4);
  EXPECT_EQ(ex[0].end_word, 4);
  auto f = squad_features(ex, tok, {}, true);
  ASSERT_EQ(f.size(), 1u);
  // [CLS] when was the dog born [SEP] cafe steve smith ' s dog ( 1895 - 1943 ) was quick . [SEP]
  //   0    1    2   3   4   5    6    7    8     9   10 11 12 13  14  15  16  17 18   19  20  21
  // The answer word "(1895-1943)" is pieces 13..17; tightened to the piece "1895" (14).
  EXPECT_EQ(f[0].input_ids.size(), 22u);
  EXPECT_EQ(f[0].start_position, 14);
  EXPECT_EQ(f[0].end_position, 14);
  EXPECT_EQ(tok.vocab().token(f[0].input_ids[14]), "1895");
  EXPECT_EQ(f[0].segment_ids[6], 0);
  EXPECT_EQ(f[0].segment_ids[7], 1);
  EXPECT_EQ(f[0].segment_ids[21], 1);
  EXPECT_EQ(f[0].token_to_word[6], -1);
  EXPECT_EQ(f[0].token_to_word[9], 2);   // "'" of Smith's
  EXPECT_EQ(f[0].token_to_word[17], 4);  // ")"
  EXPECT_EQ(f[0].token_to_word[21], -1);
}

TEST(FinetuneSquad, WindowsMaxContextAndAnswerOutsideWindowIsCls) {
  const WordPieceTokenizer tok = tiny_tokenizer();
  SquadExample ex;
  ex.id = "x";
  ex.question = "q";
  ex.context = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
  ex.doc_words = squad_split_words(ex.context).words;
  ex.answers = {{"w5 w6", 15}};
  ex.start_word = 5;
  ex.end_word = 6;
  // max_seq 8 - query 1 - 3 = 4 doc pieces per window, stride 2: windows start at 0, 2, 4, 6
  // (6 + 4 = 10 reaches the end).
  auto f = squad_features({ex}, tok, {.max_seq_length = 8, .doc_stride = 2, .max_query_length = 64}, true);
  ASSERT_EQ(f.size(), 4u);
  // Max context, score = min(left, right) + 0.01 * 4:
  //   piece 2: window 0 (0..3) 1.04, window 1 (2..5) 0.04 -> window 0
  //   piece 3: window 0 0.04, window 1 1.04 -> window 1;  piece 4: w1 1.04, w2 (4..7) 0.04 -> w1
  //   piece 5: w1 0.04, w2 1.04 -> w2;  piece 6: w2 1.04, w3 (6..9) 0.04 -> w2;  piece 7: w3
  // Positions: [CLS] q [SEP] d0 d1 d2 d3 [SEP] -> doc at 3..6.
  const std::vector<std::vector<uint8_t>> want = {
      {0, 0, 0, 1, 1, 1, 0, 0}, {0, 0, 0, 0, 1, 1, 0, 0}, {0, 0, 0, 0, 1, 1, 0, 0}, {0, 0, 0, 0, 1, 1, 1, 0}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(f[i].token_is_max_context, want[i]) << "window " << i;
    EXPECT_EQ(f[i].input_ids.size(), 8u);
    EXPECT_EQ(tok.vocab().token(f[i].input_ids[3]), "w" + std::to_string(2 * i));
  }
  // Answer pieces 5..6: only window 2 (4..7) holds both -> positions 5 - 4 + 3 = 4 and 5.
  EXPECT_EQ(std::make_pair(f[0].start_position, f[0].end_position), std::make_pair(int64_t(0), int64_t(0)));
  EXPECT_EQ(std::make_pair(f[1].start_position, f[1].end_position), std::make_pair(int64_t(0), int64_t(0)));
  EXPECT_EQ(std::make_pair(f[2].start_position, f[2].end_position), std::make_pair(int64_t(4), int64_t(5)));
  EXPECT_EQ(std::make_pair(f[3].start_position, f[3].end_position), std::make_pair(int64_t(0), int64_t(0)));
  EXPECT_TRUE(squad_is_max_context({{0, 4}, {2, 4}}, 0, 2));
  EXPECT_FALSE(squad_is_max_context({{0, 4}, {2, 4}}, 0, 3));
  // No room for the document: an Error, not a crash.
  EXPECT_NE(error_of([&] { squad_features({ex}, tok, {.max_seq_length = 4}, true); }).find("leaves no room"),
            std::string::npos);
}

TEST(FinetuneSquad, QueryIsTruncatedToMaxQueryLength) {
  const WordPieceTokenizer tok = tiny_tokenizer();
  SquadExample ex;
  ex.question = "w1 w2 w3 w4";
  ex.doc_words = {"w0"};
  auto f = squad_features({ex}, tok, {.max_seq_length = 16, .doc_stride = 4, .max_query_length = 2}, false);
  ASSERT_EQ(f.size(), 1u);
  // [CLS] w1 w2 [SEP] w0 [SEP]
  EXPECT_EQ(f[0].input_ids.size(), 6u);
  EXPECT_EQ(tok.vocab().token(f[0].input_ids[4]), "w0");
}

// ---- SQuAD decoding -------------------------------------------------------------------------

struct DecodeFixture {
  WordPieceTokenizer tok = tiny_tokenizer();
  std::vector<SquadExample> ex;
  std::vector<SquadFeature> f;
  DecodeFixture() {
    ex = parse_squad(one_question_json(kContext, "1895", 24), "t.json", false);
    f = squad_features(ex, tok, {}, false);
  }
  std::string predict(const std::vector<std::pair<int, float>>& start, const std::vector<std::pair<int, float>>& end,
                      int64_t max_answer_length = 30) {
    SquadLogits lg;
    lg.start.assign(f[0].input_ids.size(), -10.0f);  // a confident "not here" everywhere else
    lg.end.assign(f[0].input_ids.size(), -10.0f);
    for (auto [i, v] : start) lg.start[size_t(i)] = v;
    for (auto [i, v] : end) lg.end[size_t(i)] = v;
    return squad_predict(ex, f, {lg}, tok, {.n_best_size = 20, .max_answer_length = max_answer_length}).at("id1");
  }
};

TEST(FinetuneSquadDecode, BestValidSpanMappedToOriginalText) {
  DecodeFixture d;
  // Positions as in FeatureImprovesAnswerSpanAndCountsCodePoints; logits -10 where not given.
  // The query position 1 has the largest logits but is outside the document; (14, 16)
  // "1895 - 1943" (5 + 6) is the best valid span, and get_final_text maps it into
  // "(1895-1943)" without the parentheses.
  EXPECT_EQ(d.predict({{1, 10}, {14, 5}, {8, 4}}, {{1, 10}, {16, 6}, {10, 3}}), "1895-1943");
  // With max_answer_length 2 that span (3 pieces) is too long: (14, 14) 5 + 1 = 6 beats
  // (15, 16) -10 + 6 = -4 and (8, 8) 4 - 10.
  EXPECT_EQ(d.predict({{14, 5}, {8, 4}}, {{16, 6}, {14, 1}}, 2), "1895");
  EXPECT_EQ(d.predict({{14, 5}, {8, 4}}, {{16, 6}, {14, 1}}, 30), "1895-1943");
  // "smith ' s" -> the original casing and apostrophe.
  EXPECT_EQ(d.predict({{9, 9}}, {{11, 8}}), "Smith's");
  // "smith" alone: a prefix of the word "Smith's".
  EXPECT_EQ(d.predict({{9, 9}}, {{9, 8}}), "Smith");
  // "steve smith" across two words: the original words, without the "'s".
  EXPECT_EQ(d.predict({{8, 9}}, {{9, 8}}), "Steve Smith");
  // "quick" out of the word "quick.".
  EXPECT_EQ(d.predict({{19, 9}}, {{19, 9}}), "quick");
  // Reversed spans are invalid: (16, 14) would score 40; the best valid is (13, 14) "( 1895"
  // (3 + 20) ahead of (16, 17) (20 + 2).
  EXPECT_EQ(d.predict({{16, 20}, {13, 3}}, {{14, 20}, {17, 2}}), "(1895");
}

TEST(FinetuneSquadDecode, AccentsAndNoValidSpan) {
  DecodeFixture d;
  // "cafe" maps back to the accented original word.
  EXPECT_EQ(d.predict({{7, 9}}, {{7, 9}}), "Caf\xC3\xA9");
  // Direct get_final_text cases.
  EXPECT_EQ(squad_final_text("brown", "Quick-Brown", true, true), "Brown");
  EXPECT_EQ(squad_final_text("steve smith", "Steve Smith's", true, true), "Steve Smith");
  EXPECT_EQ(squad_final_text("xyz", "abc", true, true), "abc");  // not found: whole original words
  // A cased tokenizer keeps the case: "brown" is not in "Quick - Brown".
  EXPECT_EQ(squad_final_text("brown", "Quick-Brown", false, false), "Quick-Brown");
  // No feature at all for an example -> "empty", as run_squad.
  std::vector<SquadExample> ex(1);
  ex[0].id = "z";
  EXPECT_EQ(squad_predict(ex, {}, {}, d.tok, {}).at("z"), "empty");
}

TEST(FinetuneSquadDecode, OnlyMaxContextStartsCount) {
  const WordPieceTokenizer tok = tiny_tokenizer();
  SquadExample ex;
  ex.id = "x";
  ex.question = "q";
  ex.context = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
  ex.doc_words = squad_split_words(ex.context).words;
  auto f = squad_features({ex}, tok, {.max_seq_length = 8, .doc_stride = 2, .max_query_length = 64}, false);
  ASSERT_EQ(f.size(), 4u);
  std::vector<SquadLogits> lg(4);
  for (auto& l : lg) l.start.assign(8, -100.0f), l.end.assign(8, -100.0f);
  // Window 0, position 6 = piece w3 (max context in window 1): a huge score, ignored as a start
  // (as an end it only pairs with starts at -100).
  lg[0].start[6] = 50;
  lg[0].end[6] = 50;
  // Window 1, position 4 = piece w3 with max context: the answer.
  lg[1].start[4] = 5;
  lg[1].end[4] = 5;
  EXPECT_EQ(squad_predict({ex}, f, lg, tok, {}).at("x"), "w3");
}

// Round trip on random text with the real vocabulary: for every answer made of whole context
// words, peaking the logits at the feature's gold (start, end) must decode to the answer
// exactly, whatever the windowing; and every document piece has max context in exactly one
// window.
TEST(FinetuneSquadDecode, RandomRoundTripRecoversAnswers) {
  const std::string vocab_path = std::string(UNMASK_SOURCE_DIR) + "/data/bert-base-uncased-vocab.txt";
  ASSERT_TRUE(std::filesystem::exists(vocab_path)) << vocab_path << " not found (it is part of the repository)";
  const WordPieceTokenizer tok(Vocab::load(vocab_path));
  unmask::test::TestRng rng;
  SCOPED_TRACE(rng.note());
  const Strings words = {"The", "river", "Caf\xC3\xA9", "(1895-1943)", "Smith's", "U.S.", "naïve", "quickly,",
                         "\xE6\x9D\xB1\xE4\xBA\xAC", "unbelievably", "42", "x", "\xF0\x9F\x98\x80", "end.", "don't",
                         "Z\xC3\xBCrich", "antidisestablishmentarianism"};
  int64_t checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SquadExample ex;
    ex.id = "r" + std::to_string(trial);
    ex.question = "what is it?";
    const int64_t n_words = rng.integer(1, 40);
    for (int64_t i = 0; i < n_words; ++i) ex.doc_words.push_back(words[size_t(rng.integer(0, int64_t(words.size()) - 1))]);
    ex.start_word = rng.integer(0, n_words - 1);
    ex.end_word = std::min(n_words - 1, ex.start_word + rng.integer(0, 3));
    std::string answer;
    int64_t offset = 0;  // code points before the answer
    for (int64_t i = 0; i < n_words; ++i) {
      if (i == ex.start_word) offset = int64_t(unmask::text::unicode::decode_utf8(ex.context).size()) + (i ? 1 : 0);
      ex.context += (i ? " " : "") + ex.doc_words[size_t(i)];
      if (i >= ex.start_word && i <= ex.end_word) answer += (i > ex.start_word ? " " : "") + ex.doc_words[size_t(i)];
    }
    ex.answers = {{answer, offset}};
    // The reader agrees with the construction.
    auto parsed = parse_squad(one_question_json(ex.context, answer, offset), "r.json", true);
    ASSERT_EQ(parsed.size(), 1u) << ex.context << " / " << answer;
    EXPECT_EQ(parsed[0].start_word, ex.start_word);
    EXPECT_EQ(parsed[0].end_word, ex.end_word);
    const SquadFeatureOptions fo{.max_seq_length = rng.integer(12, 40), .doc_stride = rng.integer(1, 8), .max_query_length = 64};
    const auto f = squad_features({ex}, tok, fo, true);
    // Windows start every min(doc_stride, room) pieces ("what is it?" is 4 pieces).
    const int64_t stride = std::min(fo.doc_stride, fo.max_seq_length - 4 - 3);
    int64_t doc_pieces = 0;
    for (const auto& w : ex.doc_words) doc_pieces += int64_t(tok.tokenize(w).size());
    std::map<int64_t, int> owners;  // doc piece -> windows where it has max context
    std::vector<SquadLogits> lg(f.size());
    bool placed = false;
    for (size_t i = 0; i < f.size(); ++i) {
      lg[i].start.assign(f[i].input_ids.size(), 0.0f);
      lg[i].end.assign(f[i].input_ids.size(), 0.0f);
      const int64_t doc_offset = int64_t(f[i].input_ids.size()) - 1 -
                                 std::count_if(f[i].token_to_word.begin(), f[i].token_to_word.end(), [](int64_t w) { return w >= 0; });
      for (size_t t = 0; t < f[i].input_ids.size(); ++t)
        if (f[i].token_is_max_context[t]) ++owners[int64_t(t) - doc_offset + int64_t(i) * stride];
      const int64_t s = f[i].start_position, e = f[i].end_position;
      if (!placed && s > 0 && f[i].token_is_max_context[size_t(s)] && e - s < 30) {
        lg[i].start[size_t(s)] = 10;
        lg[i].end[size_t(e)] = 10;
        placed = true;
      }
    }
    for (const auto& [piece, n] : owners) EXPECT_EQ(n, 1) << "piece " << piece << " trial " << trial;
    EXPECT_EQ(int64_t(owners.size()), doc_pieces) << "trial " << trial;
    EXPECT_EQ(owners.begin()->first, 0);
    if (!placed) continue;
    ++checked;
    EXPECT_EQ(squad_predict({ex}, f, lg, tok, {}).at(ex.id), answer) << "context: " << ex.context;
  }
  std::printf("round trip: %lld of 60 answers decoded\n", (long long)checked);
  EXPECT_GT(checked, 30);
}

// ---- SQuAD bad input --------------------------------------------------------------------------

TEST(FinetuneSquadInput, BadFilesGiveClearErrors) {
  EXPECT_NE(error_of([] { read_squad("/nonexistent/train.json", true); }).find("/nonexistent/train.json not found"),
            std::string::npos);
  const std::string bad = error_of([] { parse_squad("{\"data\": [", "bad.json", true); });
  EXPECT_NE(bad.find("bad.json is not valid JSON"), std::string::npos) << bad;
  EXPECT_NE(bad.find("line 1"), std::string::npos) << bad;
  const std::string no_data = error_of([] { parse_squad("{\"version\": 1}", "v.json", true); });
  EXPECT_NE(no_data.find("has no \"data\""), std::string::npos) << no_data;
  const std::string wrong = error_of([] {
    parse_squad("{\"data\": [{\"paragraphs\": [{\"context\": \"a\", \"qas\": [{\"id\": \"1\", \"question\": \"q\", "
                "\"answers\": [{\"text\": \"a\", \"answer_start\": \"0\"}]}]}]}]}",
                "w.json", true);
  });
  EXPECT_NE(wrong.find("data[0].paragraphs[0].qas[0].answers[0].answer_start is not an integer"), std::string::npos)
      << wrong;
}

// SQuAD v2.0 is refused (by its version string, and by an unanswerable question in a file that
// does not say its version), for training and for evaluation: v1.1 rules would score it wrong.
TEST(FinetuneSquadInput, Version2IsRefused) {
  const std::string para =
      "{\"context\": \"a b\", \"qas\": [{\"id\": \"1\", \"question\": \"q\", \"answers\": [{\"text\": \"a\", "
      "\"answer_start\": 0}]}, {\"id\": \"2\", \"question\": \"q2\", \"answers\": [], \"is_impossible\": true}]}";
  for (bool training : {true, false}) {
    const std::string by_version = error_of([&] {
      parse_squad("{\"version\": \"v2.0\", \"data\": [{\"paragraphs\": []}]}", "dev-v2.0.json", training);
    });
    EXPECT_NE(by_version.find("dev-v2.0.json is SQuAD v2.0 (\"version\": \"v2.0\")"), std::string::npos) << by_version;
    const std::string by_content =
        error_of([&] { parse_squad("{\"data\": [{\"paragraphs\": [" + para + "]}]}", "x.json", training); });
    EXPECT_NE(by_content.find("data[0].paragraphs[0].qas[1].is_impossible is true"), std::string::npos) << by_content;
    EXPECT_NE(by_content.find("SQuAD v1.1 only"), std::string::npos) << by_content;
  }
  // v1.1 with an explicit is_impossible: false still loads.
  std::string ok_para = para;
  ok_para.replace(ok_para.find("[], \"is_impossible\": true"), std::string("[], \"is_impossible\": true").size(),
                  "[{\"text\": \"b\", \"answer_start\": 2}], \"is_impossible\": false");
  EXPECT_EQ(parse_squad("{\"version\": \"1.1\", \"data\": [{\"paragraphs\": [" + ok_para + "]}]}", "v1.json", false).size(), 2u);
}

TEST(FinetuneSquadInput, MismatchedAnswerIsSkippedWithWarning) {
  SquadReadReport r;
  // answer_start 0 points at "Café", not "1895": skipped when training, like HF.
  auto ex = parse_squad(one_question_json(kContext, "1895", 0), "m.json", true, &r);
  EXPECT_TRUE(ex.empty());
  EXPECT_EQ(r.skipped, 1);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("could not find answer"), std::string::npos) << r.warnings[0];
  // A byte offset (25) instead of the code-point offset (24) lands on "1895" shifted by one:
  // "895-" lies inside the word "(1895-1943)", so HF's check passes and the example is kept.
  EXPECT_EQ(parse_squad(one_question_json(kContext, "1895", 25), "m.json", true).size(), 1u);
  // Past the end of the context.
  SquadReadReport r2;
  EXPECT_TRUE(parse_squad(one_question_json(kContext, "1895", 999), "m.json", true, &r2).empty());
  EXPECT_NE(r2.warnings.at(0).find("outside the context"), std::string::npos);
  // An answer of whitespace only, in a context of whitespace only.
  SquadReadReport r3;
  EXPECT_TRUE(parse_squad(one_question_json("   ", " ", 1), "m.json", true, &r3).empty());
  EXPECT_NE(r3.warnings.at(0).find("only whitespace"), std::string::npos);
  // Evaluation keeps every question.
  EXPECT_EQ(parse_squad(one_question_json(kContext, "1895", 0), "m.json", false).size(), 1u);
}

// ---- GLUE-style TSV ---------------------------------------------------------------------------

TEST(FinetuneGlue, TsvParsingAndColumnErrors) {
  const std::string mrpc =
      "\xEF\xBB\xBFQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
      "1\t1\t2\tHe said \"yes\".\tHe agreed.\r\n"
      "\n"
      "0\t3\t4\tA dog.\tA cat.\n";
  const TsvTable t = parse_tsv(mrpc, "mrpc.tsv");
  EXPECT_EQ(t.header.at(0), "Quality");  // the byte-order mark is dropped
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][3], "He said \"yes\".");  // quotes are text
  EXPECT_EQ(t.lines, (std::vector<int64_t>{2, 4}));
  const ClassifyColumnIndex c = resolve_columns(t, {});
  EXPECT_EQ(c.text_a, 3);
  EXPECT_EQ(c.text_b, 4);
  EXPECT_EQ(c.label, 0);
  const auto ex = classify_examples(t, c);
  EXPECT_EQ(ex[1].text_b.value(), "A cat.");
  EXPECT_EQ(label_list(ex), (Strings{"0", "1"}));

  const std::string err = error_of([] { parse_tsv("a\tb\n1\t2\n1\t2\t3\n", "x.tsv"); });
  EXPECT_NE(err.find("x.tsv:3: 3 tab-separated columns, but the header has 2"), std::string::npos) << err;
  EXPECT_NE(error_of([] { read_tsv("/nonexistent/a.tsv"); }).find("not found"), std::string::npos);
  EXPECT_NE(error_of([] { parse_tsv("", "e.tsv"); }).find("e.tsv is empty"), std::string::npos);

  const TsvTable sst = parse_tsv("sentence\tlabel\ngood movie\t1\n", "sst.tsv");
  const ClassifyColumnIndex s = resolve_columns(sst, {});
  EXPECT_EQ(s.text_a, 0);
  EXPECT_EQ(s.text_b, -1);
  EXPECT_EQ(s.label, 1);
  const TsvTable odd = parse_tsv("x\ty\tz\n1\t2\t3\n", "odd.tsv");
  EXPECT_NE(error_of([&] { resolve_columns(odd, {}); }).find("cannot tell the text and label columns"), std::string::npos);
  const ClassifyColumnIndex by_index = resolve_columns(odd, {.text_a = "z", .text_b = "0", .label = "1"});
  EXPECT_EQ(by_index.text_a, 2);
  EXPECT_EQ(by_index.text_b, 0);
  EXPECT_EQ(by_index.label, 1);
  EXPECT_NE(error_of([&] { resolve_columns(odd, {.text_a = "w", .label = "y"}); }).find("\"w\" is not a column"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_columns(odd, {.text_a = "7", .label = "y"}); }).find("past the last column"),
            std::string::npos);
}

TEST(FinetuneGlue, TruncateSeqPairAndFeatures) {
  std::vector<int32_t> a = {1, 2, 3, 4, 5}, b = {6, 7, 8};
  truncate_seq_pair(a, b, 6);  // 5+3 -> pop a (4,3) -> pop a (3,3)
  EXPECT_EQ(a, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(b, (std::vector<int32_t>{6, 7, 8}));
  truncate_seq_pair(a, b, 5);  // tie: pop b -> (3,2)
  EXPECT_EQ(b, (std::vector<int32_t>{6, 7}));

  const WordPieceTokenizer tok = tiny_tokenizer();
  std::vector<ClassifyExample> ex = {{"new york is big", std::string("small dog"), "1", 2}};
  auto f = classify_features(ex, {"0", "1"}, tok, 7, false);
  // 4 + 2 pieces into 7 - 3 = 4: pop a (3,2), pop a (2,2): [CLS] new york [SEP] small dog [SEP]
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(tok.decode(f[0].input_ids), "[CLS] new york [SEP] small dog [SEP]");
  EXPECT_EQ(f[0].segment_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(f[0].label, 1);
  const std::string err = error_of([&] { classify_features({{"dog", {}, "2", 9}}, {"0", "1"}, tok, 8); });
  EXPECT_NE(err.find("line 9: label \"2\" is not one of the model's labels"), std::string::npos) << err;
}

TEST(FinetuneGlue, AccuracyAndF1ByHand) {
  // Binary: acc 3/5; positive class 1: tp 2, gold 3, predicted 3 -> F1 = 2*2/(3+3) = 2/3.
  ClassifyScore s = classify_score({1, 1, 0, 0, 1}, {1, 0, 0, 1, 1}, 2, 1);
  EXPECT_TRUE(s.binary);
  EXPECT_NEAR(s.accuracy, 60.0, 1e-9);
  EXPECT_NEAR(s.f1, 200.0 / 3.0, 1e-9);
  // Macro over 3 classes: class 0 F1 1; class 1 tp 0 -> 0; class 2 tp 1, gold 2, pred 2 -> 0.5.
  s = classify_score({0, 1, 2, 2}, {0, 2, 2, 1}, 3, 1);
  EXPECT_FALSE(s.binary);
  EXPECT_NEAR(s.accuracy, 50.0, 1e-9);
  EXPECT_NEAR(s.f1, 50.0, 1e-9);
  // A class absent from gold and predictions is left out of the macro mean: classes 0 and 2 only.
  s = classify_score({0, 2}, {0, 0}, 3, 1);  // class 0: tp 1, gold 1, pred 2 -> 2/3; class 2: 0
  EXPECT_NEAR(s.f1, 100.0 / 3.0, 1e-9);
  EXPECT_EQ(positive_label_index({"0", "1"}), 1);
  EXPECT_EQ(positive_label_index({"1", "neg"}), 0);
  EXPECT_EQ(positive_label_index({"neg", "pos"}), 1);
}

// ---- CoNLL ------------------------------------------------------------------------------------

TEST(FinetuneConll, ParseSkipsDocstartAndTakesLastColumn) {
  const std::string text =
      "-DOCSTART- -X- -X- O\n\n"
      "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\n"
      "Peter NNP B-NP B-PER\r\n";
  const auto s = parse_conll(text, "c.txt");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].words, (Strings{"EU", "rejects"}));
  EXPECT_EQ(s[0].labels, (Strings{"B-ORG", "O"}));
  EXPECT_EQ(s[0].line, 3);
  EXPECT_EQ(s[1].labels, (Strings{"B-PER"}));
  EXPECT_EQ(conll_label_list(s), (Strings{"B-ORG", "B-PER", "O"}));
  const std::string err = error_of([] { parse_conll("a O\nlonely\n", "l.txt"); });
  EXPECT_NE(err.find("l.txt:2: \"lonely\" has no label"), std::string::npos) << err;
  EXPECT_NE(error_of([] { read_conll("/nonexistent/c.txt"); }).find("not found"), std::string::npos);
}

std::vector<Chunk> chunks(const Strings& tags) { return extract_chunks(tags); }

TEST(FinetuneConll, ConllevalChunks) {
  // BIO.
  EXPECT_EQ(chunks({"B-PER", "I-PER", "O", "B-LOC"}), (std::vector<Chunk>{{0, 1, "PER"}, {3, 3, "LOC"}}));
  // B after B of the same type starts a new chunk.
  EXPECT_EQ(chunks({"B-PER", "B-PER"}), (std::vector<Chunk>{{0, 0, "PER"}, {1, 1, "PER"}}));
  // IOB1: I- opens a chunk after O or after another type; B- only separates same-type chunks.
  EXPECT_EQ(chunks({"I-PER", "I-PER", "I-LOC", "O", "I-ORG", "B-ORG"}),
            (std::vector<Chunk>{{0, 1, "PER"}, {2, 2, "LOC"}, {4, 4, "ORG"}, {5, 5, "ORG"}}));
  // I- after O starts a chunk; a type change inside a B- chunk ends it.
  EXPECT_EQ(chunks({"O", "I-MISC", "I-MISC"}), (std::vector<Chunk>{{1, 2, "MISC"}}));
  EXPECT_EQ(chunks({"B-PER", "I-LOC", "I-LOC"}), (std::vector<Chunk>{{0, 0, "PER"}, {1, 2, "LOC"}}));
  // IOBES: S- is one token, E- closes.
  EXPECT_EQ(chunks({"S-PER", "S-PER", "B-LOC", "E-LOC", "I-LOC"}),
            (std::vector<Chunk>{{0, 0, "PER"}, {1, 1, "PER"}, {2, 3, "LOC"}, {4, 4, "LOC"}}));
  EXPECT_TRUE(chunks({"O", "O"}).empty());
  EXPECT_TRUE(chunks({}).empty());
}

TEST(FinetuneConll, ChunkF1ByHand) {
  // Gold chunks: PER(0,1) LOC(3,3) | ORG(0,0) = 3; predicted: PER(0,1) ORG(3,3) | ORG(0,0) = 3;
  // correct 2 -> P = R = F1 = 66.67. Tokens 6, 5 equal -> accuracy 83.33.
  ChunkScore s = chunk_score({{"B-PER", "I-PER", "O", "B-LOC"}, {"B-ORG", "O"}},
                             {{"B-PER", "I-PER", "O", "B-ORG"}, {"B-ORG", "O"}});
  EXPECT_EQ(s.gold_chunks, 3);
  EXPECT_EQ(s.predicted_chunks, 3);
  EXPECT_EQ(s.correct_chunks, 2);
  EXPECT_NEAR(s.f1, 200.0 / 3.0, 1e-9);
  EXPECT_NEAR(s.accuracy, 500.0 / 6.0, 1e-9);
  EXPECT_EQ(s.per_type.at("LOC").gold, 1);
  EXPECT_EQ(s.per_type.at("LOC").correct, 0);
  // Predicted PER(0,0) only, gold PER(0,1) LOC(3,3): a partial chunk is wrong -> P 0, R 0, F1 0.
  s = chunk_score({{"B-PER", "I-PER", "O", "B-LOC"}}, {{"B-PER", "O", "O", "O"}});
  EXPECT_EQ(s.correct_chunks, 0);
  EXPECT_EQ(s.f1, 0.0);
  // Predicted 2 chunks both right, gold 3: P 100, R 66.67, F1 = 2*100*66.67/166.67 = 80.
  s = chunk_score({{"B-PER", "I-PER", "O", "B-LOC"}, {"B-ORG", "O"}}, {{"B-PER", "I-PER", "O", "O"}, {"B-ORG", "O"}});
  EXPECT_NEAR(s.precision, 100.0, 1e-9);
  EXPECT_NEAR(s.recall, 200.0 / 3.0, 1e-9);
  EXPECT_NEAR(s.f1, 80.0, 1e-9);
  EXPECT_NE(error_of([] { chunk_score({{"O"}}, {{"O", "O"}}); }).find("1 gold tags but 2 predicted"), std::string::npos);
}

TEST(FinetuneConll, FeaturesLabelFirstPieceAndWindow) {
  const WordPieceTokenizer tok = tiny_tokenizer();
  ConllSentence s;
  s.words = {"Steve", "jumped", "w1", "dogs"};
  s.labels = {"B-PER", "O", "O", "O"};
  const Strings labels = {"B-PER", "O"};
  // Pieces: steve | jump ##ed | w1 | dog ##s  -> 6 pieces; max_seq 6 leaves 4 per window:
  // window 1: steve jump ##ed w1 (4), window 2: dog ##s.
  auto f = conll_features({s}, labels, tok, 6);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(tok.decode(f[0].input_ids), "[CLS] steve jumped w1 [SEP]");
  EXPECT_EQ(f[0].labels, (std::vector<int32_t>{-100, 0, 1, -100, 1, -100}));
  EXPECT_EQ(f[0].word_of_token, (std::vector<int64_t>{-1, 0, 1, -1, 2, -1}));
  EXPECT_EQ(f[1].first_word, 3);
  EXPECT_EQ(f[1].labels, (std::vector<int32_t>{-100, 1, -100, -100}));
  // Predictions come from each word's first piece: logits [T, 2] row-major.
  std::vector<std::vector<float>> lg = {std::vector<float>(12, 0.0f), std::vector<float>(8, 0.0f)};
  lg[0][1 * 2 + 0] = 1;  // steve -> B-PER
  lg[0][2 * 2 + 1] = 1;  // jump -> O
  lg[0][3 * 2 + 0] = 9;  // ##ed: ignored
  lg[0][4 * 2 + 0] = 1;  // w1 -> B-PER
  lg[1][1 * 2 + 1] = 1;  // dog -> O
  EXPECT_EQ(conll_word_predictions(f, lg, 2, {s}), (std::vector<std::vector<int32_t>>{{0, 1, 0, 1}}));
  const std::string err = error_of([&] { conll_features({s}, {"O"}, tok, 6); });
  EXPECT_NE(err.find("label \"B-PER\" is not one of the model's labels"), std::string::npos) << err;
}

// ---- batching ---------------------------------------------------------------------------------

TEST(FinetuneBatch, PaddedTensors) {
  std::vector<SquadFeature> f(2);
  f[0].input_ids = {2, 7, 3};
  f[0].segment_ids = {0, 0, 1};
  f[0].start_position = 1;
  f[0].end_position = 2;
  f[1].input_ids = {2, 3};
  f[1].segment_ids = {0, 1};
  const unmask::TaskBatch b = qa_batch(f, {1, 0}, true);
  ASSERT_EQ(b.input_ids.size(0), 2);
  ASSERT_EQ(b.input_ids.size(1), 3);
  const int32_t* ids = b.input_ids.data<int32_t>();
  const int32_t* mask = b.attention_mask.data<int32_t>();
  const int32_t* seg = b.token_type_ids.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 6), (std::vector<int32_t>{2, 3, 0, 2, 7, 3}));
  EXPECT_EQ(std::vector<int32_t>(mask, mask + 6), (std::vector<int32_t>{1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(std::vector<int32_t>(seg, seg + 6), (std::vector<int32_t>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(b.start_positions.data<int32_t>()[1], 1);
  EXPECT_EQ(b.end_positions.data<int32_t>()[1], 2);
  EXPECT_FALSE(qa_batch(f, {0}, false).start_positions.defined());

  std::vector<ConllFeature> c(1);
  c[0].input_ids = {2, 9, 3};
  c[0].labels = {-100, 4, -100};
  std::vector<ConllFeature> c2 = c;
  c2.push_back(c[0]);
  c2[1].input_ids = {2, 9, 9, 3};
  c2[1].labels = {-100, 1, 2, -100};
  const unmask::TaskBatch t = tokens_batch(c2, {0, 1}, true);
  const int32_t* l = t.labels.data<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(l, l + 8), (std::vector<int32_t>{-100, 4, -100, -100, -100, 1, 2, -100}));

  unmask::Tensor logits = unmask::Tensor::zeros({2, 3, 2}, unmask::DType::f32);
  logits.data<float>()[1 * 6 + 2 * 2 + 1] = 7;  // b 1, t 2, end
  EXPECT_EQ(batch_row(logits, 1, 3, 1), (std::vector<float>{0, 0, 7}));
  EXPECT_EQ(batch_row(logits, 1, 2, -1).size(), 4u);
}

// ---- end to end: a tiny random BERT learns each task ------------------------------------------

// A 2-layer, 32-wide BERT over the tiny vocabulary; dropout off so a few dozen steps suffice.
struct TinySetup {
  WordPieceTokenizer tok = tiny_tokenizer();
  unmask::Context ctx{{.num_threads = 2}};
  unmask::BertTrainModel base;
  TrainOptions train_options;
  TinySetup() : base(unmask::BertTrainModel::random(config(), {}, 11)) {
    train_options.epochs = 100;
    train_options.max_steps = 60;
    train_options.batch = 8;
    train_options.lr = 2e-3f;
    train_options.warmup = 0.1;
    train_options.hidden_dropout = train_options.attention_dropout = 0.0f;
  }
  unmask::BertConfig config() const {
    unmask::BertConfig c;
    c.vocab_size = tok.vocab().size();
    c.hidden_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.intermediate_size = 64;
    c.max_position_embeddings = 64;
    return c;
  }
  // Mean of the first and last 10 step losses.
  static std::pair<double, double> loss_ends(const TrainResult& r) {
    double first = 0, last = 0;
    for (size_t i = 0; i < 10; ++i) first += r.losses[i] / 10, last += r.losses[r.losses.size() - 1 - i] / 10;
    return {first, last};
  }
};

Strings pick(std::mt19937& rng, const Strings& from, size_t n) {
  Strings out;
  for (size_t i = 0; i < n; ++i) out.push_back(from[rng() % from.size()]);
  return out;
}
std::string join_words(const Strings& w) {
  std::string s;
  for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
  return s;
}

TEST(FinetuneEndToEnd, ClassifyLearnsAboveChance) {
  TinySetup t;
  std::mt19937 rng(5);
  // "pos" iff the sentence holds "good" (else it holds "bad"); the rest is noise.
  auto make = [&](size_t n) {
    TaskData d;
    d.task = TaskKind::classify;
    d.labels = {"neg", "pos"};
    for (size_t i = 0; i < n; ++i) {
      Strings w = pick(rng, {"the", "movie", "big", "small", "w1", "w2", "w3", "a"}, 2 + rng() % 4);
      const bool pos = rng() % 2;
      w.insert(w.begin() + long(rng() % (w.size() + 1)), pos ? "good" : "bad");
      d.classify_examples.push_back({join_words(w), std::nullopt, pos ? "pos" : "neg", int64_t(i + 2)});
    }
    d.classify_features = classify_features(d.classify_examples, d.labels, t.tok, 16);
    return d;
  };
  const TaskData train_data = make(96), dev = make(40);
  unmask::BertTrainModel model = model_for_task(t.base, TaskKind::classify, train_data.labels, 3);
  EXPECT_EQ(model.config().id2label, train_data.labels);
  const double before = evaluate(t.ctx, model.to_inference_model(), dev, t.tok).value("accuracy");
  const TrainResult r = train(t.ctx, model, train_data, t.train_options);
  const auto [first, last] = TinySetup::loss_ends(r);
  const EvalResult after = evaluate(t.ctx, model.to_inference_model(), dev, t.tok);
  std::printf("classify: loss %.4f -> %.4f, dev accuracy %.1f -> %.1f, F1 %.1f\n", first, last, before,
              after.value("accuracy"), after.value("f1"));
  EXPECT_EQ(r.steps, 60);
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GE(after.value("accuracy"), 90.0);  // chance is ~50
  EXPECT_EQ(after.classify_predictions.size(), 40u);
}

TEST(FinetuneEndToEnd, TokensLearnEntities) {
  TinySetup t;
  std::mt19937 rng(6);
  auto make = [&](size_t n) {
    TaskData d;
    d.task = TaskKind::tokens;
    d.labels = {"B-LOC", "B-PER", "I-LOC", "I-PER", "O"};
    for (size_t i = 0; i < n; ++i) {
      ConllSentence s;
      s.line = int64_t(i);
      for (size_t k = 0, words = 3 + rng() % 4; k < words; ++k) {
        const unsigned r = rng() % 5;
        if (r == 0) {
          s.words.insert(s.words.end(), {"Steve", "Smith"});
          s.labels.insert(s.labels.end(), {"B-PER", "I-PER"});
        } else if (r == 1) {
          s.words.insert(s.words.end(), {"New", "York"});
          s.labels.insert(s.labels.end(), {"B-LOC", "I-LOC"});
        } else {
          s.words.push_back(pick(rng, {"the", "dog", "was", "quick", "big", "w4", "w5", "jumped"}, 1)[0]);
          s.labels.push_back("O");
        }
      }
      d.sentences.push_back(std::move(s));
    }
    d.conll_features = conll_features(d.sentences, d.labels, t.tok, 32);
    return d;
  };
  const TaskData train_data = make(96), dev = make(40);
  unmask::BertTrainModel model = model_for_task(t.base, TaskKind::tokens, train_data.labels, 3);
  const double before = evaluate(t.ctx, model.to_inference_model(), dev, t.tok).value("f1");
  const TrainResult r = train(t.ctx, model, train_data, t.train_options);
  const auto [first, last] = TinySetup::loss_ends(r);
  const EvalResult after = evaluate(t.ctx, model.to_inference_model(), dev, t.tok);
  std::printf("tokens: loss %.4f -> %.4f, dev entity F1 %.1f -> %.1f\n", first, last, before, after.value("f1"));
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GE(after.value("f1"), 80.0);
  EXPECT_GT(after.value("f1"), before + 30.0);
}

TEST(FinetuneEndToEnd, SquadLearnsToFindTheAnswer) {
  TinySetup t;
  std::mt19937 rng(7);
  // Contexts of filler words with one "dog" somewhere; the answer is always "dog".
  auto make = [&](size_t n, bool training) {
    TaskData d;
    d.task = TaskKind::squad;
    for (size_t i = 0; i < n; ++i) {
      Strings w = pick(rng, {"w0", "w1", "w2", "w3", "w4", "w5", "w6", "the", "was", "big"}, 4 + rng() % 8);
      const size_t at = rng() % (w.size() + 1);
      w.insert(w.begin() + long(at), "dog");
      SquadExample ex;
      ex.id = "q" + std::to_string(i);
      ex.question = "q";
      ex.context = join_words(w);
      ex.doc_words = w;
      int64_t offset = 0;
      for (size_t k = 0; k < at; ++k) offset += int64_t(w[k].size()) + 1;
      ex.answers = {{"dog", offset}};
      if (training) ex.start_word = ex.end_word = int64_t(at);
      d.squad_examples.push_back(std::move(ex));
    }
    d.squad_features = squad_features(d.squad_examples, t.tok, {.max_seq_length = 32, .doc_stride = 8}, training);
    return d;
  };
  const TaskData train_data = make(96, true), dev = make(40, false);
  unmask::BertTrainModel model = model_for_task(t.base, TaskKind::squad, {}, 3);
  const double before = evaluate(t.ctx, model.to_inference_model(), dev, t.tok).value("exact_match");
  const TrainResult r = train(t.ctx, model, train_data, t.train_options);
  const auto [first, last] = TinySetup::loss_ends(r);
  const EvalResult after = evaluate(t.ctx, model.to_inference_model(), dev, t.tok);
  std::printf("squad: loss %.4f -> %.4f, dev EM %.1f -> %.1f, F1 %.1f\n", first, last, before,
              after.value("exact_match"), after.value("f1"));
  EXPECT_LT(last, 0.5 * first);
  EXPECT_GE(after.value("exact_match"), 80.0);
  EXPECT_GT(after.value("exact_match"), before + 40.0);
}

TEST(FinetuneEndToEnd, TaskNamesAndBadInput) {
  EXPECT_EQ(parse_task("squad"), TaskKind::squad);
  EXPECT_EQ(parse_task("tokens"), TaskKind::tokens);
  EXPECT_NE(error_of([] { parse_task("sqad"); }).find("did you mean --task squad?"), std::string::npos);
  EXPECT_NE(error_of([] { parse_task("ner"); }).find("did you mean --task tokens?"), std::string::npos);
  EXPECT_NE(error_of([] { parse_task("zzzzzzzz"); }).find("one of squad, classify, tokens"), std::string::npos);
  unmask::BertConfig c;
  c.num_labels = 3;
  c.id2label = {"LABEL_0", "neg", ""};
  EXPECT_EQ(model_labels(c), (Strings{"0", "neg", "2"}));
  const WordPieceTokenizer tok = tiny_tokenizer();
  const std::string path = write_temp("one_label.tsv", "sentence\tlabel\ngood\t1\nbad\t1\n");
  EXPECT_NE(error_of([&] { load_task_data(TaskKind::classify, path, tok, {}, true); }).find("1 distinct label(s)"),
            std::string::npos);
}

}  // namespace
