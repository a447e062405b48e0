// data/text/vocab_trainer.h: a WordPiece vocabulary trained from raw text, by the algorithm of
// Hugging Face's BertWordPieceTokenizer.train (tokenizers' WordPieceTrainer, a BPE trainer):
//   1. normalise and pre-tokenise every line as BERT does (text/wordpiece.h) and count words;
//   2. the alphabet: every character, weighted by its words' counts; past `limit_alphabet`
//      the rarest go (words keep their other characters);
//   3. the vocabulary starts with the special tokens, then the alphabet in code-point order,
//      then each "##c" continuation as words first need it;
//   4. merges: the most frequent adjacent pair of symbols (ties: the smaller pair of ids) joins
//      into one symbol ("un" + "##able" -> "unable"), until the vocabulary is `vocab_size` or
//      the best pair occurs fewer than `min_frequency` times.
// Everything is deterministic (words are visited in sorted order, not a hash order).
//
//   VocabTrainerOptions o; o.vocab_size = 8000;
//   std::vector<std::string> vocab = train_wordpiece_vocab({"corpus.txt"}, o).vocab;
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"

namespace unmask::text {

struct VocabTrainerOptions {
  int64_t vocab_size = 30522;
  int64_t min_frequency = 2;
  int64_t limit_alphabet = 1000;
  WordPieceOptions normalizer;  // lowercase / strip_accents / tokenize_chinese_chars
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
};

struct VocabTrainerReport {
  std::vector<std::string> vocab;  // id order
  int64_t lines = 0, words = 0, unique_words = 0;
  int64_t alphabet = 0, dropped_characters = 0;  // kept, and cut by limit_alphabet
  int64_t merges = 0;
  bool stopped_by_min_frequency = false;  // fewer than vocab_size tokens: no pair was frequent enough
};

/// Trains on the lines of `files` (UTF-8 text; invalid lines are an Error naming file:line).
VocabTrainerReport train_wordpiece_vocab(const std::vector<std::string>& files, const VocabTrainerOptions& options);

}  // namespace unmask::text
