// data/text/vocab_trainer.cc: see vocab_trainer.h for the algorithm.
#include "data/text/vocab_trainer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::text {

namespace {

constexpr std::string_view kPrefix = "##";

std::string utf8_of(char32_t cp) {
  std::string s;
  unicode::append_utf8(cp, s);
  return s;
}

// A word as a list of symbol ids, with its count in the corpus.
struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

using Pair = std::pair<int32_t, int32_t>;
struct PairHash {
  size_t operator()(const Pair& p) const { return std::hash<uint64_t>{}((uint64_t(uint32_t(p.first)) << 32) | uint32_t(p.second)); }
};

// Heap entry: the most frequent pair first; equal counts, the smaller pair first.
struct Candidate {
  int64_t count;
  Pair pair;
  bool operator<(const Candidate& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

}  // namespace

VocabTrainerReport train_wordpiece_vocab(const std::vector<std::string>& files, const VocabTrainerOptions& o) {
  if (o.vocab_size < int64_t(o.special_tokens.size()) + 1)
    throw Error("vocab_size ", o.vocab_size, " leaves no room beside the ", o.special_tokens.size(), " special tokens");
  if (o.min_frequency < 1) throw Error("min_frequency must be >= 1, got ", o.min_frequency);
  if (o.limit_alphabet < 1) throw Error("limit_alphabet must be >= 1, got ", o.limit_alphabet);
  if (files.empty()) throw Error("no input files", Hint("pass --input FILE (repeatable)"));
  VocabTrainerReport report;

  // 1. Word counts (a std::map: the sorted order makes every later step deterministic).
  std::map<std::u32string, int64_t> counts;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error("cannot open ", file, Hint("check the path and its permissions"));
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no, ++report.lines;
      std::u32string cps;
      try {
        cps = unicode::decode_utf8(line, "text");
      } catch (const Error& e) {
        throw Error(file, ":", line_no, ": ", e.what(), Hint("the input must be UTF-8"));
      }
      bert_pre_tokenize(cps, o.normalizer, [&](std::u32string_view w) {
        ++counts[std::u32string(w)];
        ++report.words;
      });
    }
  }
  report.unique_words = int64_t(counts.size());
  if (counts.empty()) throw Error("the input holds no words", Hint("pass text files with content"));

  // 2. The alphabet: characters by weighted count, the rarest cut past limit_alphabet.
  std::map<char32_t, int64_t> chars;
  for (const auto& [w, n] : counts)
    for (char32_t c : w) chars[c] += n;
  std::vector<std::pair<char32_t, int64_t>> by_count(chars.begin(), chars.end());
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (int64_t(by_count.size()) > o.limit_alphabet) {
    report.dropped_characters = int64_t(by_count.size()) - o.limit_alphabet;
    by_count.resize(size_t(o.limit_alphabet));
  }
  std::set<char32_t> alphabet;
  for (const auto& [c, n] : by_count) alphabet.insert(c);
  report.alphabet = int64_t(alphabet.size());

  // 3. The vocabulary: special tokens, the alphabet, continuations as words need them.
  std::vector<std::string>& vocab = report.vocab;
  std::unordered_map<std::string, int32_t> id_of;
  auto add = [&](const std::string& token) {
    auto [it, inserted] = id_of.emplace(token, int32_t(vocab.size()));
    if (inserted) vocab.push_back(token);
    return it->second;
  };
  for (const std::string& s : o.special_tokens) add(s);
  for (char32_t c : alphabet) add(utf8_of(c));
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [w, n] : counts) {
    Word word;
    word.count = n;
    bool first = true;
    for (char32_t c : w) {
      if (!alphabet.count(c)) continue;  // a character cut from the alphabet leaves the word
      word.symbols.push_back(add(first ? utf8_of(c) : std::string(kPrefix) + utf8_of(c)));
      first = false;
    }
    if (!word.symbols.empty()) words.push_back(std::move(word));
  }

  // 4. Merges. Pair counts and the words each pair occurs in, updated as words change.
  std::unordered_map<Pair, int64_t, PairHash> pair_count;
  std::unordered_map<Pair, std::unordered_set<int32_t>, PairHash> where;
  for (int32_t wi = 0; wi < int32_t(words.size()); ++wi) {
    const Word& w = words[size_t(wi)];
    for (size_t k = 0; k + 1 < w.symbols.size(); ++k) {
      const Pair p{w.symbols[k], w.symbols[k + 1]};
      pair_count[p] += w.count;
      where[p].insert(wi);
    }
  }
  std::priority_queue<Candidate> heap;
  for (const auto& [p, n] : pair_count)
    if (n > 0) heap.push({n, p});
  while (int64_t(vocab.size()) < o.vocab_size && !heap.empty()) {
    Candidate top = heap.top();
    heap.pop();
    const int64_t now = pair_count[top.pair];
    if (now != top.count) {  // stale: counts changed since it was pushed
      if (now > 0) heap.push({now, top.pair});
      continue;
    }
    if (top.count < o.min_frequency) {
      report.stopped_by_min_frequency = true;
      break;
    }
    const std::string& b = vocab[size_t(top.pair.second)];
    const std::string joined =
        vocab[size_t(top.pair.first)] + (b.compare(0, kPrefix.size(), kPrefix) == 0 ? b.substr(kPrefix.size()) : b);
    const int32_t merged = add(joined);
    ++report.merges;
    // Rewrite every word holding the pair, left to right, and move the counts of its neighbours.
    std::vector<int32_t> holders(where[top.pair].begin(), where[top.pair].end());
    std::sort(holders.begin(), holders.end());
    std::unordered_set<Pair, PairHash> changed;
    auto bump = [&](const Pair& p, int64_t delta, int32_t wi) {
      pair_count[p] += delta;
      if (delta > 0) where[p].insert(wi);
      changed.insert(p);
    };
    for (int32_t wi : holders) {
      Word& w = words[size_t(wi)];
      std::vector<int32_t>& s = w.symbols;
      for (size_t k = 0; k + 1 < s.size();) {
        if (s[k] != top.pair.first || s[k + 1] != top.pair.second) {
          ++k;
          continue;
        }
        if (k > 0) bump({s[k - 1], s[k]}, -w.count, wi), bump({s[k - 1], merged}, w.count, wi);
        if (k + 2 < s.size()) bump({s[k + 1], s[k + 2]}, -w.count, wi), bump({merged, s[k + 2]}, w.count, wi);
        s[k] = merged;
        s.erase(s.begin() + std::ptrdiff_t(k) + 1);
        ++k;
      }
    }
    pair_count[top.pair] = 0;
    where.erase(top.pair);
    for (const Pair& p : changed)
      if (const int64_t n = pair_count[p]; n > 0 && p != top.pair) heap.push({n, p});
  }
  return report;
}

}  // namespace unmask::text
