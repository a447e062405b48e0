// data/text/instances.h: Google's create_pretraining_data.py instance rules on token-id documents.
//
//   data::Corpus corpus = ...;                               // documents of sentences of ids
//   data::InstanceBuffer out;
//   data::Rng rng(data::derive_key(seed, {data::kStreamDocument, dupe, doc}));
//   data::create_instances_from_document(corpus, doc, opts, rng, out);
//
// The rules (reference/bert.md 1.4), kept step for step from create_instances_from_document:
//   * target = max_seq_length - 3; with probability short_seq_prob (drawn ONCE per document
//     and dupe, as Google does) a uniform target in [2, max_seq_length - 3];
//   * sentences accumulate into a chunk until the chunk reaches the target or the document
//     ends; A = the first a_end sentences (a_end uniform in [1, len(chunk) - 1], 1 for a
//     one-sentence chunk);
//   * B: with probability 0.5, or always when the chunk has one sentence, sentences from a
//     random other document (10 tries to draw an index != this one), from a random start until
//     target - len(A) tokens; the chunk's unused sentences are "put back" (the loop rewinds);
//     else the rest of the chunk;
//   * truncate_seq_pair: while len(A) + len(B) > max_seq_length - 3, drop one token of the
//     longer (B on a tie), from the front or the back with probability 0.5;
//   * [CLS] A [SEP] B [SEP], then mask_tokens (below).
// Differences, all statistical no-ops: each (dupe, document) has its own RNG stream (so the
// result does not depend on the thread count), the documents are not shuffled before the
// instances are built (the instance order is shuffled afterwards either way), and a new file
// always starts a new document (Google's loop lets a document run on across files).
#pragma once
#include <cstdint>
#include <vector>

#include "data/rng.h"

namespace unmask::data {

/// Documents of sentences of token ids, flat: sentence s is tokens[sentence_begin[s] ..
/// sentence_begin[s+1]); document d is sentences [document_begin[d], document_begin[d+1]).
/// Every sentence has at least one token and every document at least one sentence.
struct Corpus {
  std::vector<int32_t> tokens;
  std::vector<int64_t> sentence_begin{0};  // [num_sentences + 1]
  std::vector<int64_t> document_begin{0};  // [num_documents + 1]

  int64_t num_documents() const { return int64_t(document_begin.size()) - 1; }
  int64_t num_sentences() const { return int64_t(sentence_begin.size()) - 1; }
  int64_t num_sentences(int64_t doc) const { return document_begin[doc + 1] - document_begin[doc]; }
  /// Tokens of sentence j of document doc.
  const int32_t* sentence(int64_t doc, int64_t j) const { return tokens.data() + sentence_begin[document_begin[doc] + j]; }
  int64_t sentence_length(int64_t doc, int64_t j) const {
    int64_t s = document_begin[doc] + j;
    return sentence_begin[s + 1] - sentence_begin[s];
  }
  void add_sentence(const int32_t* ids, int64_t n);  // to the open document
  void end_document();                               // closes it (no-op when it is empty)
};

struct MaskingOptions {
  double masked_lm_prob = 0.15;
  int64_t max_predictions_per_seq = 20;
  int32_t vocab_size = 30522;  // random replacements are uniform over [0, vocab_size)
  int32_t mask_id = 103, cls_id = 101, sep_id = 102;
};

struct InstanceOptions {
  int64_t max_seq_length = 128;
  double short_seq_prob = 0.1;
  MaskingOptions masking;
};

/// Instances, flat. Instance i: tokens[token_begin[i] .. token_begin[i+1]) = [CLS] A [SEP] B
/// [SEP] after masking; segment 0 covers the first a_length[i] + 2 tokens; masked positions
/// (ascending) and their original ids are in [masked_begin[i], masked_begin[i+1]).
struct InstanceBuffer {
  std::vector<int32_t> tokens;
  std::vector<int64_t> token_begin{0};
  std::vector<int32_t> a_length;
  std::vector<int32_t> masked_positions, masked_ids;
  std::vector<int64_t> masked_begin{0};
  std::vector<uint8_t> is_random_next;
  std::vector<int32_t> chunk_sentences;  // sentences in the chunk A was cut from (1 = B forced random)

  int64_t size() const { return int64_t(a_length.size()); }
  int64_t length(int64_t i) const { return token_begin[i + 1] - token_begin[i]; }
  int64_t num_masked(int64_t i) const { return masked_begin[i + 1] - masked_begin[i]; }
  void append(const InstanceBuffer& other);
};

/// Google's num_to_predict: min(max_predictions, max(1, round(num_tokens * prob))), with
/// Python's round (half to even) on the same double product.
int64_t num_to_predict(int64_t num_tokens, const MaskingOptions& options);

/// create_masked_lm_predictions on ids in place: candidates are every position whose id is not
/// [CLS] or [SEP]; a uniformly random num_to_predict of them are chosen (a partial
/// Fisher-Yates shuffle, the same distribution as shuffling all candidates and taking the
/// first ones); each becomes [MASK] with probability 0.8, else keeps its id or takes a uniform
/// random id with probability 0.5 each. Appends the chosen positions (ascending) and the
/// original ids to positions / labels. `scratch` avoids an allocation per call.
void mask_tokens(int32_t* ids, int64_t n, const MaskingOptions& options, Rng& rng, std::vector<int32_t>& positions,
                 std::vector<int32_t>& labels, std::vector<int32_t>& scratch);

/// Google's truncate_seq_pair on two token lists.
void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t max_num_tokens, Rng& rng);

/// Appends the instances of one document (one dupe) to `out`; returns the target length drawn
/// for it (max_seq_length - 3 unless the short_seq_prob draw hit).
int64_t create_instances_from_document(const Corpus& corpus, int64_t doc, const InstanceOptions& options, Rng& rng,
                                       InstanceBuffer& out);

}  // namespace unmask::data
