// data/text/conll.h: token classification (NER, chunking) from CoNLL files, scored like conlleval.
//
//   auto sentences = finetune::read_conll("eng.train");     // word ... label per line
//   auto labels = finetune::conll_label_list(sentences);     // sorted: {"B-LOC", ..., "O"}
//   auto features = finetune::conll_features(sentences, labels, tokenizer, 128);
//   // predicted label ids per word (from the logits of each word's first piece):
//   auto words = finetune::conll_word_predictions(features, logits_per_feature, sentences);
//   ChunkScore s = finetune::chunk_score(gold_tags, predicted_tags);   // entity P/R/F1
//
// File format: one token per line, fields separated by whitespace, the label in the LAST field;
// a blank line ends a sentence; "-DOCSTART-" lines are skipped.
//
// Features: every word is WordPiece-tokenized, its label goes on the first piece and -100
// (ignored by the loss) on the others; a sentence longer than max_seq - 2 pieces is cut into
// consecutive windows at word boundaries, each [CLS] pieces [SEP].
//
// Chunks follow conlleval.pl: tags are B-X, I-X, E-X, S-X (IOBES) or O; a chunk starts at B-X,
// S-X, or at I-X/E-X after O or after a chunk of another type (so IOB1 files, where I- opens a
// chunk, score as conlleval scores them), and ends before O, B-, S- or a change of type, and
// after E- or S-. Precision, recall and F1 count exact (start, end, type) matches.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"

namespace unmask::finetune {

struct ConllSentence {
  std::vector<std::string> words;
  std::vector<std::string> labels;
  int64_t line = 0;  // 1-based line of the first word
};

/// Throws an Error naming file:line for a missing file, invalid UTF-8, or a line with a single
/// field (a word without a label). `unlabelled` (prediction): the first field is the word and
/// the labels are empty.
std::vector<ConllSentence> read_conll(const std::string& path, bool unlabelled = false);
std::vector<ConllSentence> parse_conll(const std::string& text, const std::string& origin, bool unlabelled = false);

/// The distinct labels, sorted (bytewise): label id = index.
std::vector<std::string> conll_label_list(const std::vector<ConllSentence>& sentences);

constexpr int32_t kIgnoreLabel = -100;

struct ConllFeature {
  int64_t sentence = 0;
  int64_t first_word = 0;             // index in the sentence of the window's first word
  std::vector<int32_t> input_ids;     // [T] [CLS] pieces [SEP]
  std::vector<int32_t> labels;        // [T] label id on first pieces, kIgnoreLabel elsewhere
  std::vector<int64_t> word_of_token; // [T] word index in the sentence on first pieces, -1 elsewhere
};

/// Windows of every sentence. A word with no pieces (e.g. only control characters) becomes
/// [UNK] so that every word gets a prediction. A label not in `labels` throws (naming the
/// sentence's line and the known labels) unless allow_unknown_labels (then kIgnoreLabel).
std::vector<ConllFeature> conll_features(const std::vector<ConllSentence>& sentences,
                                         const std::vector<std::string>& labels,
                                         const text::WordPieceTokenizer& tokenizer, int64_t max_seq,
                                         bool allow_unknown_labels = false);

/// Label id predicted for every word of every sentence: argmax of the logits [T, L] of each
/// feature at each word's first piece. logits[i] belongs to features[i], row-major [T, L].
std::vector<std::vector<int32_t>> conll_word_predictions(const std::vector<ConllFeature>& features,
                                                         const std::vector<std::vector<float>>& logits,
                                                         int64_t num_labels,
                                                         const std::vector<ConllSentence>& sentences);

struct Chunk {
  int64_t start = 0, end = 0;  // inclusive token indexes
  std::string type;
  bool operator<(const Chunk& o) const;
  bool operator==(const Chunk& o) const = default;
};

/// Chunks of one sentence's tag sequence by the conlleval rules above.
std::vector<Chunk> extract_chunks(const std::vector<std::string>& tags);

struct ChunkScore {
  double precision = 0, recall = 0, f1 = 0;  // x 100
  double accuracy = 0;                       // token-level, x 100
  int64_t gold_chunks = 0, predicted_chunks = 0, correct_chunks = 0, tokens = 0;
  struct Type {
    int64_t gold = 0, predicted = 0, correct = 0;
    double precision = 0, recall = 0, f1 = 0;
  };
  std::map<std::string, Type> per_type;
};

/// conlleval over sentences of (gold, predicted) tags (same lengths, else throws).
ChunkScore chunk_score(const std::vector<std::vector<std::string>>& gold,
                       const std::vector<std::vector<std::string>>& predicted);

}  // namespace unmask::finetune
