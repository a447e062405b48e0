// data/text/instances.cc: Google's instance and masking rules (see instances.h).
#include "data/text/instances.h"

#include <algorithm>
#include <cmath>

namespace unmask::data {

void Corpus::add_sentence(const int32_t* ids, int64_t n) {
  if (n <= 0) return;
  tokens.insert(tokens.end(), ids, ids + n);
  sentence_begin.push_back(int64_t(tokens.size()));
}

void Corpus::end_document() {
  if (num_sentences() > document_begin.back()) document_begin.push_back(num_sentences());
}

void InstanceBuffer::append(const InstanceBuffer& other) {
  const int64_t token_base = int64_t(tokens.size()), masked_base = int64_t(masked_positions.size());
  tokens.insert(tokens.end(), other.tokens.begin(), other.tokens.end());
  for (size_t i = 1; i < other.token_begin.size(); ++i) token_begin.push_back(token_base + other.token_begin[i]);
  a_length.insert(a_length.end(), other.a_length.begin(), other.a_length.end());
  masked_positions.insert(masked_positions.end(), other.masked_positions.begin(), other.masked_positions.end());
  masked_ids.insert(masked_ids.end(), other.masked_ids.begin(), other.masked_ids.end());
  for (size_t i = 1; i < other.masked_begin.size(); ++i) masked_begin.push_back(masked_base + other.masked_begin[i]);
  is_random_next.insert(is_random_next.end(), other.is_random_next.begin(), other.is_random_next.end());
  chunk_sentences.insert(chunk_sentences.end(), other.chunk_sentences.begin(), other.chunk_sentences.end());
}

int64_t num_to_predict(int64_t num_tokens, const MaskingOptions& options) {
  // std::nearbyint in the default rounding mode rounds half to even, like Python 3's round().
  const auto rounded = int64_t(std::nearbyint(double(num_tokens) * options.masked_lm_prob));
  return std::min<int64_t>(options.max_predictions_per_seq, std::max<int64_t>(1, rounded));
}

void mask_tokens(int32_t* ids, int64_t n, const MaskingOptions& options, Rng& rng, std::vector<int32_t>& positions,
                 std::vector<int32_t>& labels, std::vector<int32_t>& scratch) {
  scratch.clear();
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] != options.cls_id && ids[i] != options.sep_id) scratch.push_back(int32_t(i));
  const int64_t candidates = int64_t(scratch.size());
  const int64_t k = std::min(num_to_predict(n, options), candidates);
  // Partial Fisher-Yates: scratch[0..k) becomes a uniformly random k-subset.
  for (int64_t i = 0; i < k; ++i) std::swap(scratch[size_t(i)], scratch[size_t(i + int64_t(rng.below(uint64_t(candidates - i))))]);
  std::sort(scratch.begin(), scratch.begin() + k);
  for (int64_t j = 0; j < k; ++j) {
    const int32_t pos = scratch[size_t(j)];
    positions.push_back(pos);
    labels.push_back(ids[pos]);
    if (rng.uniform() < 0.8) {
      ids[pos] = options.mask_id;
    } else if (rng.uniform() >= 0.5) {  // Google: random() < 0.5 keeps the original
      ids[pos] = int32_t(rng.below(uint64_t(options.vocab_size)));
    }
  }
}

void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, int64_t max_num_tokens, Rng& rng) {
  // Google's loop trims one token at a time (del tokens[0] or pop()); the same decisions on
  // [begin, end) windows, with one erase at the end, avoid its quadratic front deletions.
  size_t a_lo = 0, a_hi = a.size(), b_lo = 0, b_hi = b.size();
  while (int64_t((a_hi - a_lo) + (b_hi - b_lo)) > max_num_tokens) {
    const bool trim_a = a_hi - a_lo > b_hi - b_lo;
    size_t& lo = trim_a ? a_lo : b_lo;
    size_t& hi = trim_a ? a_hi : b_hi;
    if (rng.uniform() < 0.5)
      ++lo;
    else
      --hi;
  }
  a.erase(a.begin() + long(a_hi), a.end());
  a.erase(a.begin(), a.begin() + long(a_lo));
  b.erase(b.begin() + long(b_hi), b.end());
  b.erase(b.begin(), b.begin() + long(b_lo));
}

int64_t create_instances_from_document(const Corpus& corpus, int64_t doc, const InstanceOptions& options, Rng& rng,
                                       InstanceBuffer& out) {
  const int64_t max_num_tokens = options.max_seq_length - 3;
  int64_t target_seq_length = max_num_tokens;
  if (rng.uniform() < options.short_seq_prob) target_seq_length = rng.randint(2, max_num_tokens);

  const int64_t num_documents = corpus.num_documents();
  const int64_t num_sentences = corpus.num_sentences(doc);
  std::vector<int64_t> chunk;  // sentence indices of the current chunk
  int64_t chunk_length = 0;
  std::vector<int32_t> a, b, scratch;
  auto extend = [&](std::vector<int32_t>& v, int64_t d, int64_t j) {
    const int32_t* s = corpus.sentence(d, j);
    v.insert(v.end(), s, s + corpus.sentence_length(d, j));
  };
  for (int64_t i = 0; i < num_sentences; ++i) {
    chunk.push_back(i);
    chunk_length += corpus.sentence_length(doc, i);
    if (i != num_sentences - 1 && chunk_length < target_seq_length) continue;
    // chunk is never empty here
    const int64_t chunk_size = int64_t(chunk.size());
    const int64_t a_end = chunk_size >= 2 ? rng.randint(1, chunk_size - 1) : 1;
    a.clear();
    b.clear();
    for (int64_t j = 0; j < a_end; ++j) extend(a, doc, chunk[size_t(j)]);
    bool is_random_next = false;
    if (chunk_size == 1 || rng.uniform() < 0.5) {
      is_random_next = true;
      const int64_t target_b_length = target_seq_length - int64_t(a.size());
      int64_t random_doc = 0;
      for (int tries = 0; tries < 10; ++tries) {
        random_doc = rng.randint(0, num_documents - 1);
        if (random_doc != doc) break;
      }
      const int64_t random_sentences = corpus.num_sentences(random_doc);
      for (int64_t j = rng.randint(0, random_sentences - 1); j < random_sentences; ++j) {
        extend(b, random_doc, j);
        if (int64_t(b.size()) >= target_b_length) break;
      }
      i -= chunk_size - a_end;  // put the unused sentences back
    } else {
      for (int64_t j = a_end; j < chunk_size; ++j) extend(b, doc, chunk[size_t(j)]);
    }
    truncate_seq_pair(a, b, max_num_tokens, rng);
    // Both keep >= 1 token: each started non-empty and the longer one is trimmed while the
    // total exceeds max_num_tokens >= 2.

    const int64_t base = int64_t(out.tokens.size());
    out.tokens.push_back(options.masking.cls_id);
    out.tokens.insert(out.tokens.end(), a.begin(), a.end());
    out.tokens.push_back(options.masking.sep_id);
    out.tokens.insert(out.tokens.end(), b.begin(), b.end());
    out.tokens.push_back(options.masking.sep_id);
    const int64_t n = int64_t(out.tokens.size()) - base;
    out.token_begin.push_back(int64_t(out.tokens.size()));
    out.a_length.push_back(int32_t(a.size()));
    mask_tokens(out.tokens.data() + base, n, options.masking, rng, out.masked_positions, out.masked_ids, scratch);
    out.masked_begin.push_back(int64_t(out.masked_positions.size()));
    out.is_random_next.push_back(is_random_next ? 1 : 0);
    out.chunk_sentences.push_back(int32_t(chunk_size));

    chunk.clear();
    chunk_length = 0;
  }
  return target_seq_length;
}

}  // namespace unmask::data
