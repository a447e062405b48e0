// train/mlm_eval.cc
#include "models/bert/mlm_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "data/text/pretrain_data.h"
#include "unmask/error.h"

namespace unmask::train {

MlmEvalResult evaluate_mlm(Context& ctx, BertTrainModel& model, const std::vector<std::string>& shards,
                           const MlmEvalOptions& o) {
  if (o.batch < 1) throw Error("evaluate_mlm: batch must be >= 1, got ", o.batch);
  if (shards.empty()) throw Error("evaluate_mlm: no shards to evaluate");
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = model.config().vocab_size;
  MlmEvalResult r;
  std::vector<int64_t> freq(size_t(V), 0);  // real tokens of the shards, for the baseline
  std::vector<int64_t> label_count(size_t(V), 0);
  double loss_sum = 0;
  int64_t correct = 0, nsp_correct = 0, nsp_count = 0;
  for (const std::string& path : shards) {
    const data::PretrainShard sh = data::read_shard(path);
    const int64_t S = sh.seq_length, P = sh.max_predictions;
    if (S > model.config().max_position_embeddings)
      throw Error(path, " has sequences of ", S, " tokens; the model has ", model.config().max_position_embeddings,
                  " positions");
    for (int64_t first = 0; first < sh.num_instances; first += o.batch) {
      if (o.max_sequences > 0 && r.sequences >= o.max_sequences) break;
      int64_t B = std::min(o.batch, sh.num_instances - first);
      if (o.max_sequences > 0) B = std::min(B, o.max_sequences - r.sequences);
      PretrainBatch b;
      auto rows = [&](const std::vector<int32_t>& v, int64_t width) {
        Tensor t = Tensor::empty({B, width}, DType::i32);
        std::copy_n(v.begin() + first * width, B * width, t.data<int32_t>());
        return t;
      };
      b.input_ids = rows(sh.input_ids, S), b.segment_ids = rows(sh.segment_ids, S), b.input_mask = rows(sh.input_mask, S);
      b.masked_lm_positions = rows(sh.masked_lm_positions, P), b.masked_lm_ids = rows(sh.masked_lm_ids, P);
      b.next_sentence_labels = Tensor::empty({B}, DType::i32);
      std::copy_n(sh.next_sentence_labels.begin() + first, B, b.next_sentence_labels.data<int32_t>());
      // The unigram counts: the original tokens (masked positions restored to their labels).
      std::vector<int32_t> original(sh.input_ids.begin() + first * S, sh.input_ids.begin() + (first + B) * S);
      for (int64_t i = 0; i < B; ++i)
        for (int64_t k = 0; k < P; ++k) {
          const int32_t pos = sh.masked_lm_positions[size_t((first + i) * P + k)];
          if (pos <= 0) break;  // the padding after the last prediction, as pretrain_step reads it
          const int32_t id = sh.masked_lm_ids[size_t((first + i) * P + k)];
          if (id < 0 || id >= V) throw Error(path, ": masked_lm_ids holds ", id, ", outside the model's vocab_size ", V);
          original[size_t(i * S + pos)] = id;
          ++label_count[size_t(id)];
        }
      for (int64_t i = 0; i < B * S; ++i)
        if (sh.input_mask[size_t(first * S + i)] && original[size_t(i)] >= 0 && original[size_t(i)] < V)
          ++freq[size_t(original[size_t(i)])];
      TrainStepOptions so;
      so.backward = false;
      so.hidden_dropout = so.attention_dropout = 0.0f;
      const PretrainStats s = model.pretrain_step(ctx, b, so);
      loss_sum += s.mlm_loss_sum, r.masked += s.mlm_count, correct += s.mlm_correct;
      nsp_correct += s.nsp_correct, nsp_count += s.nsp_count;
      r.sequences += B;
    }
  }
  if (r.masked == 0) throw Error("evaluate_mlm: the shards hold no masked positions to score");
  for (int32_t id : o.special_ids)
    if (id >= 0 && id < V) freq[size_t(id)] = 0;
  r.loss = loss_sum / double(r.masked);
  r.accuracy = double(correct) / double(r.masked);
  r.perplexity = std::exp(r.loss);
  if (nsp_count > 0) r.nsp_accuracy = double(nsp_correct) / double(nsp_count);
  // The unigram baseline: p(t) = (freq[t] + 1) / (total + V); it always answers the argmax.
  int64_t total = 0;
  for (int64_t f : freq) total += f;
  double base_loss = 0;
  for (int64_t t = 0; t < V; ++t)
    if (label_count[size_t(t)] > 0)
      base_loss -= double(label_count[size_t(t)]) * std::log(double(freq[size_t(t)] + 1) / double(total + V));
  r.unigram_top_id = int32_t(std::max_element(freq.begin(), freq.end()) - freq.begin());
  r.unigram_loss = base_loss / double(r.masked);
  r.unigram_accuracy = double(label_count[size_t(r.unigram_top_id)]) / double(r.masked);
  r.unigram_perplexity = std::exp(r.unigram_loss);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string mlm_eval_json(const MlmEvalResult& r) {
  nlohmann::ordered_json j;
  j["task"] = "mlm";
  j["sequences"] = r.sequences, j["masked"] = r.masked;
  j["mlm_loss"] = r.loss, j["mlm_accuracy"] = r.accuracy, j["perplexity"] = r.perplexity;
  if (r.nsp_accuracy >= 0) j["nsp_accuracy"] = r.nsp_accuracy;
  j["unigram_loss"] = r.unigram_loss, j["unigram_accuracy"] = r.unigram_accuracy;
  j["unigram_perplexity"] = r.unigram_perplexity;
  return j.dump() + "\n";
}

}  // namespace unmask::train
