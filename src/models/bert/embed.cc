// models/bert_embed.cc
#include "models/bert/embed.h"

#include <algorithm>
#include <numeric>

#include "unmask/error.h"

namespace unmask {

EmbedResult embed_texts(Context& ctx, const BertModel& model, const text::WordPieceTokenizer& tokenizer,
                        const std::vector<std::string>& texts, const EmbedOptions& o) {
  if (o.batch < 1) throw Error("embed: batch must be >= 1, got ", o.batch);
  const int64_t C = model.config().hidden_size, P = model.config().max_position_embeddings;
  const int64_t max_len = o.max_length > 0 ? std::min(o.max_length, P) : P;
  if (max_len < 2) throw Error("embed: max_length must be at least 2 ([CLS] and [SEP]), got ", max_len);
  EmbedResult r;
  std::vector<std::vector<int32_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    text::Encoding e;
    try {
      e = tokenizer.encode(texts[i], std::nullopt, int(max_len), text::Truncation::longest_first);
    } catch (const Error& err) {
      throw Error("embed: text ", i + 1, ": ", err.what());
    }
    r.truncated += e.num_truncated > 0;
    ids[i] = std::move(e.ids);
  }
  std::vector<size_t> order(texts.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ids[a].size() < ids[b].size(); });
  r.embeddings = Tensor::zeros({int64_t(texts.size()), C}, DType::f32);
  float* out = r.embeddings.data<float>();
  ForwardOptions fo;
  fo.pooler = fo.mlm = fo.nsp = fo.qa = fo.classifier = false;
  for (size_t first = 0; first < order.size(); first += size_t(o.batch)) {
    const size_t last = std::min(order.size(), first + size_t(o.batch));
    const int64_t B = int64_t(last - first);
    int64_t N = 0;
    for (size_t k = first; k < last; ++k) N += int64_t(ids[order[k]].size());
    BertInput in;
    in.input_ids = Tensor::empty({N}, DType::i32);
    in.cu_seqlens = Tensor::empty({B + 1}, DType::i32);
    int32_t* x = in.input_ids.data<int32_t>();
    int32_t* cu = in.cu_seqlens.data<int32_t>();
    cu[0] = 0;
    for (size_t k = first; k < last; ++k) {
      const std::vector<int32_t>& t = ids[order[k]];
      std::copy(t.begin(), t.end(), x + cu[k - first]);
      cu[k - first + 1] = cu[k - first] + int32_t(t.size());
    }
    BertOutputs res = model.forward(ctx, in, fo);
    const Tensor h = (res.last_hidden_state.device() == Device::cpu ? res.last_hidden_state
                                                                     : res.last_hidden_state.to(Device::cpu))
                         .contiguous();
    if (h.dtype() != DType::f32)
      throw Error("embed: the model's outputs are ", dtype_name(h.dtype()), "; embeddings are taken from f32 outputs",
                  Hint("run embed with --precision fp32"));
    const float* hp = h.data<float>();
    for (size_t k = first; k < last; ++k) {
      const int64_t begin = cu[k - first], n = cu[k - first + 1] - begin;
      float* dst = out + int64_t(order[k]) * C;
      if (o.pooling == Pooling::cls) {
        std::copy_n(hp + begin * C, C, dst);
      } else {
        std::vector<double> sum(size_t(C), 0.0);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t c = 0; c < C; ++c) sum[size_t(c)] += hp[(begin + t) * C + c];
        for (int64_t c = 0; c < C; ++c) dst[c] = float(sum[size_t(c)] / double(n));
      }
    }
    r.tokens += N;
  }
  return r;
}

}  // namespace unmask
