// tests/test_data.cc: prepare-text (Google's instance rules), HDF5 shards and the loader.
//
// The statistical tests run prepare_text on a synthetic corpus of random whole words of the
// real bert-base-uncased vocab (each word is one WordPiece token, so every token can be traced
// back to its place in the corpus) and compare counts with their expectations within 5
// binomial standard deviations. Every instance is also checked for form and traced back: A
// and B must be contiguous runs of the corpus, B right after A in the same document when
// next_sentence_label is 0 and from another document when it is 1.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <unordered_map>

#include "data/text/instances.h"
#include "data/text/pretrain_data.h"
#include "data/rng.h"
#include "data/text/text_input.h"
#include "io/file.h"
#include "io/npy.h"
#include "op_test_util.h"
#include "unmask/error.h"
#include "error_test_util.h"
#include "temp_dir.h"

namespace unmask::data {
namespace {

namespace fs = std::filesystem;

const std::string kVocab = std::string(UNMASK_SOURCE_DIR) + "/data/bert-base-uncased-vocab.txt";
constexpr int32_t kCls = 101, kSep = 102, kMask = 103, kVocabSize = 30522;

using unmask::test::TempDir;

using unmask::test::error_of;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// |x - p| <= 5 sigma of a binomial proportion over n trials (plus `slack`).
void expect_proportion(const char* what, int64_t hits, int64_t n, double p, double slack = 0) {
  ASSERT_GT(n, 0) << what;
  const double x = double(hits) / double(n), sigma = std::sqrt(p * (1 - p) / double(n));
  EXPECT_LE(std::abs(x - p), 5 * sigma + slack) << what << ": " << hits << " / " << n << " = " << x << ", expected "
                                                << p << " +- " << 5 * sigma + slack;
}

// ---- the synthetic corpus ---------------------------------------------------------------

// Whole lowercase words of the vocab (each tokenizes to its own id).
std::vector<std::pair<std::string, int32_t>> vocab_words() {
  std::vector<std::pair<std::string, int32_t>> words;
  std::ifstream in(kVocab);
  std::string line;
  for (int32_t id = 0; std::getline(in, line); ++id) {
    if (line.size() < 2) continue;
    bool alpha = true;
    for (char c : line) alpha = alpha && c >= 'a' && c <= 'z';
    if (alpha) words.emplace_back(line, id);
  }
  return words;
}

struct SyntheticCorpus {
  std::string text;                       // sentences format
  std::vector<int32_t> tokens;            // every token, documents concatenated
  std::vector<int32_t> doc_of;            // [tokens]: the document of each token
  std::unordered_map<uint64_t, std::vector<int64_t>> grams;  // 4-gram -> start positions

  static uint64_t key(const int32_t* t) {
    return (uint64_t(t[0]) << 48) ^ (uint64_t(t[1]) << 32) ^ (uint64_t(t[2]) << 16) ^ uint64_t(t[3]) * 0x9E3779B1ull;
  }
  // Start of `run` in the corpus (-1 if absent; -2 if too short to look up).
  int64_t find(const std::vector<int32_t>& run) const {
    if (run.size() < 4) return -2;
    auto it = grams.find(key(run.data()));
    if (it == grams.end()) return -1;
    for (int64_t p : it->second)
      if (p + int64_t(run.size()) <= int64_t(tokens.size()) && std::equal(run.begin(), run.end(), tokens.begin() + p))
        return p;
    return -1;
  }
};

SyntheticCorpus make_corpus(int num_docs, uint64_t seed, int max_sentences = 30) {
  static const auto words = vocab_words();
  std::mt19937_64 gen(seed);
  auto pick = [&](int lo, int hi) { return lo + int(gen() % uint64_t(hi - lo + 1)); };
  SyntheticCorpus c;
  for (int d = 0; d < num_docs; ++d) {
    const int sentences = pick(1, max_sentences);
    for (int s = 0; s < sentences; ++s) {
      const int n = pick(3, 30);
      for (int w = 0; w < n; ++w) {
        const auto& [word, id] = words[gen() % words.size()];
        c.text += (w ? " " : "") + word;
        c.tokens.push_back(id);
        c.doc_of.push_back(d);
      }
      c.text += "\n";
    }
    c.text += "\n";
  }
  for (int64_t p = 0; p + 4 <= int64_t(c.tokens.size()); ++p) c.grams[SyntheticCorpus::key(&c.tokens[p])].push_back(p);
  return c;
}

// The big prepare_text run shared by the statistical tests.
struct BigRun {
  TempDir dir;
  SyntheticCorpus corpus;
  PrepareReport report;
  PretrainShard shard;
  double seconds = 0;
};

BigRun* big_run() {
  static std::unique_ptr<BigRun> run = [] {  // destroyed at exit, which removes its directory
    auto r = std::make_unique<BigRun>();
    r->corpus = make_corpus(1300, 11);
    write_text(r->dir / "corpus.txt", r->corpus.text);
    PrepareOptions o;
    o.inputs = {r->dir / "corpus.txt"};
    o.vocab = kVocab;
    o.output_dir = r->dir / "out";
    o.num_threads = 2;
    o.progress = false;
    const auto t0 = std::chrono::steady_clock::now();
    r->report = prepare_text(o);
    r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r->shard = read_shard(r->report.shards.at(0));
    return r;
  }();
  return run.get();
}

#define REQUIRE_VOCAB() \
  ASSERT_TRUE(fs::exists(kVocab)) << "vocab " << kVocab << " not found (it is part of the repository)"

// Original tokens of row r: masked_lm_ids written back at masked_lm_positions.
std::vector<int32_t> restored_row(const PretrainShard& sh, int64_t r, int64_t* length, int64_t* masked) {
  const int64_t S = sh.seq_length, P = sh.max_predictions;
  int64_t n = 0;
  while (n < S && sh.input_mask[size_t(r * S + n)] == 1) ++n;
  std::vector<int32_t> t(sh.input_ids.begin() + r * S, sh.input_ids.begin() + r * S + n);
  int64_t k = 0;
  for (; k < P && sh.masked_lm_positions[size_t(r * P + k)] != 0; ++k)
    t[size_t(sh.masked_lm_positions[size_t(r * P + k)])] = sh.masked_lm_ids[size_t(r * P + k)];
  *length = n;
  *masked = k;
  return t;
}

// ---- RNG and helpers ----------------------------------------------------------------------

TEST(DataRng, UniformAndBelowAreUnbiasedAndKeysIndependent) {
  Rng rng(derive_key(1, {2, 3}));
  std::vector<int64_t> counts(7, 0);
  const int64_t n = 700000;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    ++counts[size_t(rng.below(7))];
    sum += rng.uniform();
  }
  for (int64_t c : counts) expect_proportion("below(7)", c, n, 1.0 / 7);
  EXPECT_NEAR(sum / double(n), 0.5, 5 * std::sqrt(1.0 / 12 / double(n)));
  EXPECT_NE(derive_key(1, {2, 3}), derive_key(1, {3, 2}));
  EXPECT_NE(derive_key(1, {2}), derive_key(2, {2}));
  Rng a(derive_key(1, {2, 3})), b(derive_key(1, {2, 3}));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next(), b.next());
  for (int i = 0; i < 1000; ++i) {
    const int64_t x = rng.randint(2, 5);
    EXPECT_TRUE(x >= 2 && x <= 5) << x;
  }
}

TEST(DataInstances, NumToPredictRoundsHalfToEvenLikePython) {
  MaskingOptions m;  // 0.15, cap 20
  EXPECT_EQ(num_to_predict(5, m), 1);    // round(0.75) = 1
  EXPECT_EQ(num_to_predict(3, m), 1);    // max(1, round(0.45) = 0)
  EXPECT_EQ(num_to_predict(10, m), 2);   // round(1.5) = 2 (half to even)
  EXPECT_EQ(num_to_predict(30, m), 4);   // round(4.5) = 4 (half to even)
  EXPECT_EQ(num_to_predict(50, m), 8);   // round(7.5) = 8
  EXPECT_EQ(num_to_predict(128, m), 19); // round(19.2)
  EXPECT_EQ(num_to_predict(512, m), 20); // capped
}

TEST(DataSplit, SentenceRules) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_sentences("Hello world. This is it! Really? Yes."), (V{"Hello world.", "This is it!", "Really?", "Yes."}));
  EXPECT_EQ(split_sentences("Mr. Smith met Dr. Jones. They talked."), (V{"Mr. Smith met Dr. Jones.", "They talked."}));
  EXPECT_EQ(split_sentences("Use e.g. Python or i.e. the C language. Then stop."),
            (V{"Use e.g. Python or i.e. the C language.", "Then stop."}));
  EXPECT_EQ(split_sentences("Written in C. Then ported."), (V{"Written in C. Then ported."}));  // an "initial"
  EXPECT_EQ(split_sentences("J. R. R. Tolkien wrote it. He was British."),
            (V{"J. R. R. Tolkien wrote it.", "He was British."}));
  EXPECT_EQ(split_sentences("apples, pears etc. Bananas too."), (V{"apples, pears etc. Bananas too."}));
  EXPECT_EQ(split_sentences("version 3.11 is out. 2024 was good."), (V{"version 3.11 is out.", "2024 was good."}));
  EXPECT_EQ(split_sentences("He said \"stop.\" Then he left."), (V{"He said \"stop.\"", "Then he left."}));
  EXPECT_EQ(split_sentences("Call f(x). \"Quoted\" next."), (V{"Call f(x).", "\"Quoted\" next."}));
  EXPECT_EQ(split_sentences("lower. case does not split."), (V{"lower. case does not split."}));
  EXPECT_EQ(split_sentences("Wait... What?! Ok."), (V{"Wait...", "What?!", "Ok."}));
  EXPECT_EQ(split_sentences("Über alles. Ärger folgt."), (V{"Über alles.", "Ärger folgt."}));
  EXPECT_EQ(split_sentences("No terminator at the end"), (V{"No terminator at the end"}));
  EXPECT_EQ(split_sentences("   "), V{});
  EXPECT_EQ(split_sentences("See Fig. 3 for more. Done."), (V{"See Fig. 3 for more.", "Done."}));
}

TEST(DataInput, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("plain ascii text, long enough for the fast path"));
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("bad \xff byte"));
  EXPECT_FALSE(is_valid_utf8("overlong \xc0\xaf"));
  EXPECT_FALSE(is_valid_utf8("surrogate \xed\xa0\x80"));
  EXPECT_FALSE(is_valid_utf8("truncated \xe6\x97"));
  EXPECT_FALSE(is_valid_utf8("above max \xf4\x90\x80\x80"));
}

// ---- instance rules through the internal API -------------------------------------------------

TEST(DataInstances, ShortSeqProbabilityPerDocument) {
  Corpus c;
  const int32_t s[] = {2000, 2001, 2002};
  for (int d = 0; d < 2; ++d) {
    c.add_sentence(s, 3);
    c.add_sentence(s, 3);
    c.end_document();
  }
  InstanceOptions o;  // 128, 0.1
  const int64_t n = 40000;
  int64_t short_targets = 0;
  double sum_short = 0;
  for (int64_t k = 0; k < n; ++k) {
    Rng rng(derive_key(99, {kStreamDocument, uint64_t(k), 0}));
    InstanceBuffer out;
    const int64_t t = create_instances_from_document(c, 0, o, rng, out);
    ASSERT_TRUE(t >= 2 && t <= 125) << t;
    if (t < 125) ++short_targets, sum_short += double(t);
  }
  // randint(2, 125) gives 125 itself with probability 1/124.
  expect_proportion("short target", short_targets, n, 0.1 * 123.0 / 124.0);
  EXPECT_NEAR(sum_short / double(short_targets), (2 + 124) / 2.0, 5 * 35.5 / std::sqrt(double(short_targets)));
}

TEST(DataInstances, NextSentenceIsRandomHalfTheTime) {
  // Random next with probability 0.5, always when the chunk holds one sentence. Documents of
  // 1..40 sentences of 3..30 tokens give both kinds of chunk.
  Corpus c;
  std::mt19937_64 gen(17);
  std::vector<int32_t> s(30);
  for (int d = 0; d < 300; ++d) {
    for (int j = 0, n = 1 + int(gen() % 40); j < n; ++j) {
      const int len = 3 + int(gen() % 28);
      for (int k = 0; k < len; ++k) s[size_t(k)] = 1000 + int32_t(gen() % 20000);
      c.add_sentence(s.data(), len);
    }
    c.end_document();
  }
  InstanceOptions o;
  InstanceBuffer all;
  for (int dupe = 0; dupe < 10; ++dupe)
    for (int64_t d = 0; d < c.num_documents(); ++d) {
      Rng rng(derive_key(5, {kStreamDocument, uint64_t(dupe), uint64_t(d)}));
      create_instances_from_document(c, d, o, rng, all);
    }
  int64_t multi = 0, multi_random = 0, single = 0;
  for (int64_t i = 0; i < all.size(); ++i) {
    ASSERT_LE(all.length(i), 128);
    if (all.chunk_sentences[size_t(i)] == 1) {
      ++single;
      ASSERT_EQ(all.is_random_next[size_t(i)], 1) << "a one-sentence chunk needs a random B";
    } else {
      ++multi;
      multi_random += all.is_random_next[size_t(i)];
    }
  }
  ASSERT_GT(multi, 10000);
  ASSERT_GT(single, 100);
  expect_proportion("is_random_next (chunks of >= 2 sentences)", multi_random, multi, 0.5);
}

TEST(DataInstances, TruncateSeqPairTrimsTheLongerFromBothEnds) {
  Rng rng(3);
  int64_t front = 0, back = 0;
  for (int t = 0; t < 2000; ++t) {
    std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {9, 10};
    truncate_seq_pair(a, b, 7, rng);
    ASSERT_EQ(a.size(), 5u);  // the longer lost 3
    ASSERT_EQ(b.size(), 2u);
    front += a.front() != 1;
    back += a.back() != 8;
    std::vector<int32_t> x = {1, 2}, y = {3, 4};
    truncate_seq_pair(x, y, 3, rng);  // a tie trims B
    ASSERT_EQ(x.size(), 2u);
  }
  EXPECT_GT(front, 1500);  // P(front untouched after 3 trims) = 1/8
  EXPECT_GT(back, 1500);
}

// ---- prepare_text on the synthetic corpus ------------------------------------------------------

TEST(DataPrepare, EveryInstanceIsWellFormedAndTracesBackToTheCorpus) {
  REQUIRE_VOCAB();
  BigRun& r = *big_run();
  const PretrainShard& sh = r.shard;
  std::printf("[ prepare  ] %lld documents, %lld tokens -> %lld instances in %.2f s (%.0f instances/s, 2 threads)\n",
              (long long)r.report.documents, (long long)r.report.tokens, (long long)r.report.instances, r.seconds,
              double(r.report.instances) / r.seconds);
  ASSERT_EQ(r.report.documents, 1300);
  ASSERT_EQ(r.report.tokens, int64_t(r.corpus.tokens.size()));
  ASSERT_GE(sh.num_instances, 20000);
  ASSERT_EQ(sh.num_instances, r.report.instances);
  ASSERT_EQ(sh.seq_length, 128);
  ASSERT_EQ(sh.max_predictions, 20);
  const int64_t S = 128, P = 20;
  MaskingOptions m;
  int64_t traced = 0, too_short = 0;
  for (int64_t i = 0; i < sh.num_instances; ++i) {
    SCOPED_TRACE("instance " + std::to_string(i));
    int64_t n, k;
    const std::vector<int32_t> t = restored_row(sh, i, &n, &k);
    ASSERT_GE(n, 5);
    ASSERT_EQ(t[0], kCls);
    ASSERT_EQ(t[size_t(n - 1)], kSep);
    const int64_t sep1 = std::find(t.begin() + 1, t.end(), kSep) - t.begin();
    ASSERT_LT(sep1, n - 2) << "A and B both need a token";
    ASSERT_EQ(std::count(t.begin(), t.end(), kSep), 2);
    for (int64_t c = 0; c < S; ++c) {  // plain ifs: millions of checks stay cheap under ASan
      const int32_t seg = sh.segment_ids[size_t(i * S + c)];
      if (seg != (c <= sep1 || c >= n ? 0 : 1)) FAIL() << "segment id " << seg << " at " << c;
      if (c >= n && sh.input_ids[size_t(i * S + c)] != 0) FAIL() << "padding id at " << c;
    }
    ASSERT_EQ(k, num_to_predict(n, m)) << "masked count for length " << n;
    for (int64_t j = 0; j < P; ++j) {
      const int32_t pos = sh.masked_lm_positions[size_t(i * P + j)];
      if (j >= k) {
        ASSERT_EQ(pos, 0);
        ASSERT_EQ(sh.masked_lm_ids[size_t(i * P + j)], 0);
        continue;
      }
      ASSERT_TRUE(pos > 0 && pos < n && pos != sep1 && pos != n - 1) << "position " << pos;
      if (j > 0) ASSERT_GT(pos, sh.masked_lm_positions[size_t(i * P + j - 1)]);
    }
    // Trace A and B to the corpus.
    const std::vector<int32_t> a(t.begin() + 1, t.begin() + sep1), b(t.begin() + sep1 + 1, t.begin() + n - 1);
    const int64_t pa = r.corpus.find(a), pb = r.corpus.find(b);
    if (pa == -2 || pb == -2) {
      ++too_short;
      continue;
    }
    ASSERT_GE(pa, 0) << "segment A is not a run of the corpus";
    ASSERT_GE(pb, 0) << "segment B is not a run of the corpus";
    const int32_t doc_a = r.corpus.doc_of[size_t(pa)], doc_b = r.corpus.doc_of[size_t(pb)];
    ASSERT_EQ(doc_a, r.corpus.doc_of[size_t(pa + int64_t(a.size()) - 1)]) << "A spans two documents";
    ASSERT_EQ(doc_b, r.corpus.doc_of[size_t(pb + int64_t(b.size()) - 1)]) << "B spans two documents";
    if (sh.next_sentence_labels[size_t(i)] == 0) {
      ASSERT_EQ(doc_a, doc_b) << "actual next sentence from another document";
      ASSERT_GE(pb, pa + int64_t(a.size())) << "actual next sentence before A";
    } else {
      ASSERT_NE(doc_a, doc_b) << "random next sentence from the same document";
    }
    ++traced;
  }
  EXPECT_GT(traced, sh.num_instances * 9 / 10) << too_short << " instances too short to trace";
}

TEST(DataPrepare, MaskingIs15PercentAnd801010) {
  REQUIRE_VOCAB();
  const PretrainShard& sh = big_run()->shard;
  int64_t masked = 0, candidates = 0, as_mask = 0, kept = 0, replaced = 0, replaced_low = 0;
  double ratio_sum = 0;
  for (int64_t i = 0; i < sh.num_instances; ++i) {
    int64_t n, k;
    restored_row(sh, i, &n, &k);
    masked += k;
    candidates += n - 3;
    ratio_sum += double(k) / double(n);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t pos = sh.masked_lm_positions[size_t(i * 20 + j)], label = sh.masked_lm_ids[size_t(i * 20 + j)];
      const int32_t now = sh.input_ids[size_t(i * 128 + pos)];
      ASSERT_NE(label, kCls);
      ASSERT_NE(label, kSep);
      ASSERT_TRUE(now >= 0 && now < kVocabSize);
      if (now == kMask) ++as_mask;
      else if (now == label) ++kept;
      else ++replaced, replaced_low += now < 1000;
    }
  }
  // num_to_predict = round(0.15 * length) per instance (checked exactly above), so the mean
  // ratio is 0.15 up to rounding (at most 0.5 / length, about 0.004 at length 128).
  EXPECT_NEAR(ratio_sum / double(sh.num_instances), 0.15, 0.006);
  std::printf("[ masking  ] %lld of %lld non-special tokens masked (%.4f): [MASK] %.4f, kept %.4f, random %.4f\n",
              (long long)masked, (long long)candidates, double(masked) / double(candidates),
              double(as_mask) / double(masked), double(kept) / double(masked), double(replaced) / double(masked));
  const double p_same = 1.0 / kVocabSize;  // a random replacement may draw the original id
  expect_proportion("[MASK]", as_mask, masked, 0.8);
  expect_proportion("kept", kept, masked, 0.1 + 0.1 * p_same);
  expect_proportion("random", replaced, masked, 0.1 * (1 - p_same));
  // Random ids are uniform over the whole vocab, [PAD] / [unused*] / specials (ids < 1000) too.
  expect_proportion("random id < 1000", replaced_low, replaced, 1000.0 / kVocabSize);
}

TEST(DataPrepare, NextSentenceBalance) {
  REQUIRE_VOCAB();
  const PretrainShard& sh = big_run()->shard;
  int64_t random = 0;
  for (int32_t l : sh.next_sentence_labels) random += l;
  // 0.5 plus half the share of one-sentence chunks, which are always random (exact rule:
  // DataInstances.NextSentenceIsRandomHalfTheTime); here one-sentence documents (1 in 30)
  // and short targets make those about 15% of the instances.
  std::printf("[ nsp      ] random next: %.4f of %lld\n", double(random) / double(sh.num_instances),
              (long long)sh.num_instances);
  const double x = double(random) / double(sh.num_instances), sigma = std::sqrt(0.25 / double(sh.num_instances));
  EXPECT_GE(x, 0.5 - 5 * sigma);
  EXPECT_LE(x, 0.6);
}

TEST(DataPrepare, DeterministicWhateverTheThreadsAndShardsSplitTheSameOrder) {
  REQUIRE_VOCAB();
  TempDir dir;
  SyntheticCorpus c = make_corpus(150, 5);
  write_text(dir / "a.txt", c.text);
  PrepareOptions o;
  o.inputs = {dir / "a.txt"};
  o.vocab = kVocab;
  o.dupe_factor = 2;
  o.progress = false;
  auto run = [&](const std::string& out, int threads, uint64_t seed, int64_t shards, bool force = false) {
    o.output_dir = dir / out;
    o.force = force;
    o.num_threads = threads;
    o.seed = seed;
    o.num_shards = shards;
    return prepare_text(o);
  };
  const PrepareReport one = run("t1", 1, 7, 1), two = run("t2", 2, 7, 1), three = run("t3", 3, 7, 1);
  const std::string bytes = io::read_file(one.shards[0]);
  EXPECT_EQ(bytes, io::read_file(two.shards[0])) << "1 vs 2 threads";
  EXPECT_EQ(bytes, io::read_file(three.shards[0])) << "1 vs 3 threads";
  const PrepareReport other = run("s8", 2, 8, 1);
  EXPECT_NE(bytes, io::read_file(other.shards[0])) << "seeds 7 and 8 wrote the same shard";
  EXPECT_NE(read_shard(one.shards[0]).input_ids, read_shard(other.shards[0]).input_ids);
  // Three shards: the same instances in the same order, cut in three.
  const PrepareReport split = run("k3", 2, 7, 3);
  ASSERT_EQ(split.shards.size(), 3u);
  const PretrainShard whole = read_shard(one.shards[0]);
  std::vector<int32_t> ids, nsp;
  for (const auto& path : split.shards) {
    PretrainShard s = read_shard(path);
    EXPECT_NEAR(double(s.num_instances), double(whole.num_instances) / 3, 1.0);
    ids.insert(ids.end(), s.input_ids.begin(), s.input_ids.end());
    nsp.insert(nsp.end(), s.next_sentence_labels.begin(), s.next_sentence_labels.end());
  }
  EXPECT_EQ(ids, whole.input_ids);
  EXPECT_EQ(nsp, whole.next_sentence_labels);
  // Rerunning into a directory with shards is refused (they would mix with the new ones) and
  // leaves them as they were; --force removes them all first, the stale third one included.
  const std::string before = io::read_file(split.shards[2]);
  const std::string message = error_of([&] { run("k3", 1, 7, 2); });
  EXPECT_NE(message.find("already holds 3 shard file(s)"), std::string::npos) << message;
  EXPECT_NE(message.find("--force"), std::string::npos) << message;
  EXPECT_EQ(io::read_file(split.shards[2]), before);
  const PrepareReport fewer = run("k3", 1, 7, 2, true);
  EXPECT_EQ(fewer.removed_shards, 3);
  EXPECT_EQ(fewer.shards.size(), 2u);
  EXPECT_FALSE(fs::exists(split.shards[2])) << "the stale shard of the earlier run is still there";
}

TEST(DataPrepare, DocumentsFormatSplitsSentences) {
  REQUIRE_VOCAB();
  TempDir dir;
  write_text(dir / "d.txt",
             "The cat sat. Mr. Smith came home! Was it late? Yes.\n\nA second document. It has two sentences.\n");
  PrepareOptions o;
  o.inputs = {dir / "d.txt"};
  o.vocab = kVocab;
  o.output_dir = dir / "out";
  o.format = TextFormat::documents;
  o.progress = false;
  const PrepareReport r = prepare_text(o);
  EXPECT_EQ(r.documents, 2);
  EXPECT_EQ(r.sentences, 6);
}

TEST(DataPrepare, BadInputsAreErrorsNamingTheFile) {
  REQUIRE_VOCAB();
  TempDir dir;
  PrepareOptions o;
  o.vocab = kVocab;
  o.output_dir = dir / "out";
  o.progress = false;
  auto with = [&](const std::string& name, const std::string& text) {
    write_text(dir / name, text);
    o.inputs = {dir / name};
    return error_of([&] { prepare_text(o); });
  };
  EXPECT_NE(with("empty.txt", "").find("empty.txt is empty"), std::string::npos);
  EXPECT_NE(with("blank.txt", "\n  \n\t\n").find("blank.txt is empty"), std::string::npos);
  EXPECT_NE(with("bin.dat", std::string("ab\0cd\n", 6)).find("bin.dat looks binary: NUL byte at offset 2"),
            std::string::npos);
  const std::string latin1 = with("latin1.txt", "caf\xe9\nna\xefve\ngood line\n");
  EXPECT_NE(latin1.find("latin1.txt looks binary or is not UTF-8: 2 of 3"), std::string::npos) << latin1;
  o.inputs = {dir / "missing.txt"};
  EXPECT_NE(error_of([&] { prepare_text(o); }).find("missing.txt does not exist"), std::string::npos);
  write_text(dir / "ok.txt", "one line here\nanother line\n\nthird line\n");
  o.inputs = {dir / "ok.txt"};
  o.vocab = dir / "no-vocab.txt";
  EXPECT_NE(error_of([&] { prepare_text(o); }).find("no-vocab.txt"), std::string::npos);
  o.vocab = kVocab;
  o.max_seq_length = 4;
  EXPECT_NE(error_of([&] { prepare_text(o); }).find("max_seq_length must be in [5, 4096]"), std::string::npos);
  o.max_seq_length = 128;
  o.num_shards = 1000;
  EXPECT_NE(error_of([&] { prepare_text(o); }).find("instances for 1000 shards"), std::string::npos);
}

TEST(DataPrepare, ManyTinyFilesReadIntoOneCorpus) {
  // Short files (their text fits std::string's inline buffer) read in one batch: each must keep
  // its own text, one document per file, in path order.
  REQUIRE_VOCAB();
  TempDir dir;
  const char* words[] = {"cat", "dog", "house", "river", "stone"};
  std::vector<std::string> files;
  std::vector<int32_t> expected;
  text::WordPieceTokenizer tok(text::Vocab::load(kVocab));
  for (int i = 0; i < 60; ++i) {
    const std::string text = std::string(words[i % 5]) + " " + words[(i / 5) % 5] + "\n";
    files.push_back(dir / ("f" + std::to_string(100 + i) + ".txt"));
    write_text(files.back(), text);
    for (int32_t id : tok.tokenize(text)) expected.push_back(id);
  }
  CorpusStats stats;
  const Corpus c = read_corpus(expand_inputs({dir.path.string()}), TextFormat::sentences, tok, 2, nullptr, stats);
  EXPECT_EQ(stats.files, 60);
  EXPECT_EQ(c.num_documents(), 60);
  EXPECT_EQ(c.tokens, expected);
}

TEST(DataPrepare, InvalidUtf8LinesAreSkippedAndCounted) {
  REQUIRE_VOCAB();
  TempDir dir;
  write_text(dir / "a.txt", "first sentence here\nsecond one\n\nthird \xff bad\nfourth one\nfifth [MASK] [SEP] text\n");
  PrepareOptions o;
  o.inputs = {dir / "a.txt"};
  o.vocab = kVocab;
  o.output_dir = dir / "out";
  o.progress = false;
  const PrepareReport r = prepare_text(o);
  EXPECT_EQ(r.invalid_utf8_lines, 1);
  EXPECT_EQ(r.first_invalid_utf8, dir / "a.txt:4");
  EXPECT_EQ(r.documents, 2);
  EXPECT_EQ(r.sentences, 4);
  // Literal "[MASK]" / "[SEP]" in the text are ordinary words, never special tokens.
  const PretrainShard sh = read_shard(r.shards[0]);
  for (int64_t i = 0; i < sh.num_instances; ++i) {
    int64_t n, k;
    const auto t = restored_row(sh, i, &n, &k);
    EXPECT_EQ(std::count(t.begin(), t.end(), kSep), 2);
    EXPECT_EQ(std::count(t.begin(), t.end(), kMask), 0);
  }
}

// ---- shards -------------------------------------------------------------------------------

PretrainShard random_shard(int64_t N, int64_t S, int64_t P, uint64_t seed) {
  std::mt19937_64 gen(seed);
  PretrainShard sh;
  sh.num_instances = N, sh.seq_length = S, sh.max_predictions = P;
  sh.input_ids.assign(size_t(N * S), 0);
  sh.input_mask.assign(size_t(N * S), 0);
  sh.segment_ids.assign(size_t(N * S), 0);
  sh.masked_lm_positions.assign(size_t(N * P), 0);
  sh.masked_lm_ids.assign(size_t(N * P), 0);
  sh.next_sentence_labels.assign(size_t(N), 0);
  for (int64_t r = 0; r < N; ++r) {
    const int64_t n = 5 + int64_t(gen() % uint64_t(S - 4)), a = 1 + int64_t(gen() % uint64_t(n - 4));
    for (int64_t c = 0; c < n; ++c) {
      sh.input_ids[size_t(r * S + c)] = 999 + int32_t(gen() % 29000);
      sh.input_mask[size_t(r * S + c)] = 1;
      sh.segment_ids[size_t(r * S + c)] = c > a + 1;
    }
    sh.input_ids[size_t(r * S)] = kCls;
    sh.input_ids[size_t(r * S + a + 1)] = kSep;
    sh.input_ids[size_t(r * S + n - 1)] = kSep;
    const int64_t k = std::min<int64_t>(P, 2);
    for (int64_t j = 0; j < k; ++j) {
      sh.masked_lm_positions[size_t(r * P + j)] = int32_t(1 + j);
      sh.masked_lm_ids[size_t(r * P + j)] = sh.input_ids[size_t(r * S + 1 + j)];
    }
    sh.next_sentence_labels[size_t(r)] = int32_t(gen() % 2);
  }
  return sh;
}

void expect_same(const PretrainShard& a, const PretrainShard& b) {
  EXPECT_EQ(a.num_instances, b.num_instances);
  EXPECT_EQ(a.seq_length, b.seq_length);
  EXPECT_EQ(a.max_predictions, b.max_predictions);
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.input_mask, b.input_mask);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.masked_lm_positions, b.masked_lm_positions);
  EXPECT_EQ(a.masked_lm_ids, b.masked_lm_ids);
  EXPECT_EQ(a.next_sentence_labels, b.next_sentence_labels);
}

TEST(DataShard, RoundTripAndEmptyShard) {
  TempDir dir;
  const PretrainShard sh = random_shard(37, 16, 3, 1);
  write_shard(dir / "a.hdf5", sh);
  expect_same(read_shard(dir / "a.hdf5"), sh);
  const PretrainShard empty = random_shard(0, 16, 3, 1);
  write_shard(dir / "e.h5", empty);
  expect_same(read_shard(dir / "e.h5"), empty);
  write_text(dir / "notes.txt", "x");
  EXPECT_EQ(list_shards(dir.path.string()), (std::vector<std::string>{dir / "a.hdf5", dir / "e.h5"}));
  EXPECT_EQ(list_shards(dir / "a.hdf5"), std::vector<std::string>{dir / "a.hdf5"});
  EXPECT_NE(error_of([&] { list_shards(dir / "nope"); }).find("does not exist"), std::string::npos);
}

// Writes an HDF5 file dataset by dataset (file type, shape, int64 or double values).
struct RawDataset {
  std::string name;
  hid_t file_type;
  std::vector<hsize_t> dims;
  std::vector<double> values;  // converted to file_type by HDF5
};

void write_raw(const std::string& path, const std::vector<RawDataset>& datasets) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const RawDataset& d : datasets) {
    hid_t space = H5Screate_simple(int(d.dims.size()), d.dims.data(), nullptr);
    hid_t ds = H5Dcreate2(f, d.name.c_str(), d.file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.values.data());
    H5Dclose(ds);
    H5Sclose(space);
  }
  H5Fclose(f);
}

// The datasets of a shard, as doubles, with the given file types.
std::vector<RawDataset> raw_of(const PretrainShard& sh, hid_t wide, hid_t narrow) {
  auto v = [](const std::vector<int32_t>& x) { return std::vector<double>(x.begin(), x.end()); };
  const hsize_t N = hsize_t(sh.num_instances), S = hsize_t(sh.seq_length), P = hsize_t(sh.max_predictions);
  return {{"input_ids", wide, {N, S}, v(sh.input_ids)},
          {"input_mask", narrow, {N, S}, v(sh.input_mask)},
          {"segment_ids", narrow, {N, S}, v(sh.segment_ids)},
          {"masked_lm_positions", wide, {N, P}, v(sh.masked_lm_positions)},
          {"masked_lm_ids", wide, {N, P}, v(sh.masked_lm_ids)},
          {"next_sentence_labels", narrow, {N}, v(sh.next_sentence_labels)}};
}

TEST(DataShard, AnyIntegerTypeOnDiskReads) {
  TempDir dir;
  const PretrainShard sh = random_shard(9, 12, 4, 2);
  write_raw(dir / "i8.h5", raw_of(sh, H5T_STD_I64BE, H5T_STD_U8LE));
  expect_same(read_shard(dir / "i8.h5"), sh);
  write_raw(dir / "u16.h5", raw_of(sh, H5T_STD_U32LE, H5T_STD_I16BE));
  expect_same(read_shard(dir / "u16.h5"), sh);
}

TEST(DataShard, BadShardsGiveClearMessages) {
  TempDir dir;
  const PretrainShard sh = random_shard(10, 16, 3, 3);
  auto message = [&](std::vector<RawDataset> ds) {
    write_raw(dir / "bad.h5", ds);
    return error_of([&] { read_shard(dir / "bad.h5"); });
  };
  auto good = [&] { return raw_of(sh, H5T_STD_I32LE, H5T_STD_I8LE); };
  auto expect_has = [](const std::string& msg, const std::string& want) {
    EXPECT_NE(msg.find(want), std::string::npos) << "message: " << msg << "\nwanted: " << want;
  };
  {
    auto ds = good();
    ds.erase(ds.begin() + 4);  // masked_lm_ids
    expect_has(message(ds), "has no dataset 'masked_lm_ids' (it holds: input_ids, input_mask, masked_lm_positions, "
                            "next_sentence_labels, segment_ids)");
  }
  {
    auto ds = good();
    ds[0].file_type = H5T_IEEE_F32LE;
    expect_has(message(ds), "dataset 'input_ids' has type float (32-bit), expected an integer type (DLE writes i4)");
  }
  {
    auto ds = good();
    ds[2].dims[0] = 9;
    ds[2].values.resize(9 * 16);
    expect_has(message(ds), "is ragged: 'segment_ids' has 9 rows but 'input_ids' has 10");
  }
  {
    auto ds = good();
    ds[4].dims[1] = 2;
    ds[4].values.resize(10 * 2);
    expect_has(message(ds), "is ragged: 'masked_lm_ids' has 2 columns but 'masked_lm_positions' has 3");
  }
  {
    auto ds = good();
    ds[5].dims = {10, 1};
    expect_has(message(ds), "dataset 'next_sentence_labels' has rank 2, expected 1");
  }
  {
    auto ds = good();
    ds[1].values[16 * 2 + 1] = 2;
    expect_has(message(ds), "input_mask[2, 1] = 2, expected 0 or 1");
  }
  {
    auto ds = good();
    ds[3].values[3 * 3 + 1] = 16;
    expect_has(message(ds), "masked_lm_positions[3, 1] = 16 is outside [0, 16)");
  }
  write_text(dir / "text.hdf5", "this is not hdf5\n");
  expect_has(error_of([&] { read_shard(dir / "text.hdf5"); }), "text.hdf5 is not an HDF5 file");
  expect_has(error_of([&] { read_shard(dir / "none.hdf5"); }), "none.hdf5 does not exist");
}

// ---- loader --------------------------------------------------------------------------------

// Three shards of different sizes; row r of shard f has input_ids[1] = 1000 + 100 f + r.
std::vector<std::string> loader_shards(const TempDir& dir) {
  std::vector<std::string> files;
  const int64_t sizes[] = {23, 0, 31, 17};
  for (int f = 0; f < 4; ++f) {
    PretrainShard sh = random_shard(sizes[f], 16, 3, uint64_t(10 + f));
    for (int64_t r = 0; r < sh.num_instances; ++r) sh.input_ids[size_t(r * 16 + 1)] = int32_t(1000 + 100 * f + r);
    for (int64_t r = 0; r < sh.num_instances; ++r) sh.masked_lm_ids[size_t(r * 3)] = int32_t(1000 + 100 * f + r);
    files.push_back(dir / ("s" + std::to_string(f) + ".hdf5"));
    write_shard(files.back(), sh);
  }
  return files;
}

std::vector<int32_t> flat(const PretrainBatch& b) {
  std::vector<int32_t> v;
  for (const Tensor* t : {&b.input_ids, &b.segment_ids, &b.input_mask, &b.masked_lm_positions, &b.masked_lm_ids,
                          &b.next_sentence_labels})
    v.insert(v.end(), t->data<int32_t>(), t->data<int32_t>() + t->numel());
  return v;
}

TEST(DataLoader, EpochsVisitEveryInstanceOnceInANewOrder) {
  TempDir dir;
  LoaderOptions o;
  o.files = loader_shards(dir);
  o.batch_size = 7;
  PretrainLoader loader(o);
  EXPECT_EQ(loader.seq_length(), 16);
  const int64_t total = 23 + 31 + 17;
  std::vector<int32_t> stream;  // input_ids[1] of each row: the instance's identity
  while (int64_t(stream.size()) < 3 * total) {
    PretrainBatch b = loader.next();
    ASSERT_EQ(b.input_ids.shape(), (Shape{7, 16}));
    ASSERT_EQ(b.masked_lm_positions.shape(), (Shape{7, 3}));
    for (int64_t r = 0; r < 7; ++r) stream.push_back(b.input_ids.data<int32_t>()[r * 16 + 1]);
  }
  for (int e = 0; e < 3; ++e) {
    std::vector<int32_t> epoch(stream.begin() + e * total, stream.begin() + (e + 1) * total);
    std::set<int32_t> unique(epoch.begin(), epoch.end());
    EXPECT_EQ(int64_t(unique.size()), total) << "epoch " << e;
    if (e > 0) EXPECT_NE(epoch, std::vector<int32_t>(stream.begin(), stream.begin() + total));
  }
}

TEST(DataLoader, ResumeAndPrefetchGiveIdenticalBatches) {
  TempDir dir;
  LoaderOptions o;
  o.files = loader_shards(dir);
  o.batch_size = 5;
  o.dynamic_masking = true;
  o.max_predictions_per_seq = 4;
  std::vector<std::vector<int32_t>> batches;
  std::vector<LoaderPosition> positions;
  {
    PretrainLoader a(o);
    for (int i = 0; i < 40; ++i) {  // about 3 epochs
      positions.push_back(a.position());
      batches.push_back(flat(a.next()));
    }
  }
  for (int start : {0, 3, 13, 29}) {
    PretrainLoader b(o, positions[size_t(start)]);
    for (int i = start; i < 40; ++i) ASSERT_EQ(flat(b.next()), batches[size_t(i)]) << "resumed at " << start << ", batch " << i;
  }
  o.prefetch = false;
  PretrainLoader c(o);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(flat(c.next()), batches[size_t(i)]) << "prefetch off, batch " << i;
  LoaderPosition bad{0, 9, 0};
  EXPECT_NE(error_of([&] { PretrainLoader d(o, bad); }).find("outside the 4 shard files"), std::string::npos);
}

TEST(DataLoader, DynamicMaskingRedrawsGoogleMasksPerEpoch) {
  REQUIRE_VOCAB();
  BigRun& r = *big_run();
  LoaderOptions o;
  o.files = r.report.shards;
  o.batch_size = 64;
  o.seed = 9;
  PretrainLoader fixed(o);
  o.dynamic_masking = true;
  PretrainLoader dynamic(o);
  const int64_t batches = r.shard.num_instances / 64;
  int64_t masked = 0, as_mask = 0, kept = 0, same_positions = 0, rows = 0;
  MaskingOptions m;
  PretrainShard a, b;  // one batch each, as shards, to reuse restored_row
  for (int64_t i = 0; i < batches; ++i) {
    for (auto [loader, sh] : {std::pair{&fixed, &a}, std::pair{&dynamic, &b}}) {
      PretrainBatch x = loader->next();
      sh->num_instances = 64, sh->seq_length = 128, sh->max_predictions = 20;
      auto vec = [](const Tensor& t) { return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel()); };
      sh->input_ids = vec(x.input_ids), sh->input_mask = vec(x.input_mask), sh->segment_ids = vec(x.segment_ids);
      sh->masked_lm_positions = vec(x.masked_lm_positions), sh->masked_lm_ids = vec(x.masked_lm_ids);
      sh->next_sentence_labels = vec(x.next_sentence_labels);
    }
    ASSERT_EQ(a.segment_ids, b.segment_ids);
    ASSERT_EQ(a.next_sentence_labels, b.next_sentence_labels);
    for (int64_t row = 0; row < 64; ++row, ++rows) {
      int64_t na, ka, nb, kb;
      ASSERT_EQ(restored_row(a, row, &na, &ka), restored_row(b, row, &nb, &kb)) << "dynamic masking changed the text";
      ASSERT_EQ(kb, num_to_predict(nb, m));
      same_positions += std::equal(a.masked_lm_positions.begin() + row * 20, a.masked_lm_positions.begin() + row * 20 + 20,
                                   b.masked_lm_positions.begin() + row * 20);
      for (int64_t j = 0; j < kb; ++j) {
        const int32_t pos = b.masked_lm_positions[size_t(row * 20 + j)], label = b.masked_lm_ids[size_t(row * 20 + j)];
        const int32_t now = b.input_ids[size_t(row * 128 + pos)];
        ASSERT_TRUE(label != kCls && label != kSep && pos > 0 && pos < nb);
        ++masked;
        as_mask += now == kMask;
        kept += now == label;
      }
    }
  }
  expect_proportion("dynamic [MASK]", as_mask, masked, 0.8);
  expect_proportion("dynamic kept", kept, masked, 0.1 + 0.1 / kVocabSize);
  EXPECT_LT(same_positions, rows / 100) << "dynamic masks repeat the static ones";
}

// ---- h5py, an independent reader and writer -------------------------------------------------

bool have_h5py() {
  if (::access("/usr/bin/python3", X_OK) != 0) return false;
  return std::system("/usr/bin/python3 -c 'import h5py, numpy' > /dev/null 2>&1") == 0;
}

TEST(DataPython, H5pyReadsOurShardsAndWeReadDleStyleH5pyShards) {
  REQUIRE_VOCAB();
  if (!have_h5py()) GTEST_SKIP() << "/usr/bin/python3 with h5py and numpy not available";
  TempDir dir;
  const std::string script = std::string(UNMASK_SOURCE_DIR) + "/tests/python/check_shards.py";
  const std::string log = dir / "log.txt";
  const std::string check = "/usr/bin/python3 " + script + " check " + big_run()->report.shards[0] +
                            " --seq 128 --pred 20 > " + log + " 2>&1";
  EXPECT_EQ(std::system(check.c_str()), 0) << io::read_file(log);
  const std::string write = "/usr/bin/python3 " + script + " write " + (dir / "dle") + " --n 150 --seq 48 --pred 8 > " +
                            log + " 2>&1";
  ASSERT_EQ(std::system(write.c_str()), 0) << io::read_file(log);
  const PretrainShard sh = read_shard(dir / "dle/dle.hdf5");
  ASSERT_EQ(sh.num_instances, 150);
  ASSERT_EQ(sh.seq_length, 48);
  ASSERT_EQ(sh.max_predictions, 8);
  auto npy = [&](const char* key) {
    Tensor t = io::read_npy(dir / (std::string("dle/") + key + ".npy"));
    return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  };
  EXPECT_EQ(sh.input_ids, npy("input_ids"));
  EXPECT_EQ(sh.input_mask, npy("input_mask"));
  EXPECT_EQ(sh.segment_ids, npy("segment_ids"));
  EXPECT_EQ(sh.masked_lm_positions, npy("masked_lm_positions"));
  EXPECT_EQ(sh.masked_lm_ids, npy("masked_lm_ids"));
  EXPECT_EQ(sh.next_sentence_labels, npy("next_sentence_labels"));
}

}  // namespace
}  // namespace unmask::data
