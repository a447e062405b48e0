// app/cmd_infer.cc: `unmask infer`, the seed's fill-mask demo, and `unmask forward`, which runs
// a batch of token ids from .npy files (used by the PyTorch parity tests).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "cli.h"
#include "io/file.h"
#include "models/bert/embed.h"
#include "models/bert/finetune.h"
#include "io/npy.h"
#include "model_dir.h"
#include "unmask/bert.h"
#include "unmask/context.h"
#include "unmask/error.h"

namespace unmask::cli {

namespace {

void dump(const std::string& dir, const std::string& name, const Tensor& t) {
  if (t.defined()) io::write_npy(dir + "/" + name + ".npy", t.is_contiguous() ? t : t.contiguous());
}

Tensor to_i64(const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::i64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// The outputs of a forward on another device, copied to the host.
void outputs_to_host(BertOutputs& o) {
  for (Tensor* t : o.tensors())
    if (t->defined()) {
      if (t->device() != Device::cpu) *t = t->to(Device::cpu);
      if (t->dtype() != DType::f32) *t = t->cast(DType::f32);  // bf16 / f16 models: f32 for printing and .npy
    }
}

void make_dump_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create dump directory ", dir, ": ", ec.message());
}

}  // namespace

int cmd_infer(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "Hugging Face model directory (config.json, model.safetensors, vocab.txt)", ""},
      {"text", "STR", "input text; each [MASK] gets its top-k predictions", ""},
      {"pair", "STR", "second sentence (token_type_ids 1)", ""},
      {"top-k", "K", "predictions printed per [MASK]", "5"},
      {"dump", "OUTDIR", "write input_ids, token_type_ids, last_hidden_state, pooler_output, mlm_logits, nsp_logits as .npy", ""},
      {"no-truncate", "", "fail instead of truncating text longer than the model's positions", ""},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      device_option(),
      {"precision", "fp32|tf32|bf16|fp16", "CUDA: bf16/fp16 weights and activations, or TF32 GEMMs (outputs are written as f32); CPU: bf16 Linear products on a bf16 matrix unit", "fp32"},
  };
  auto args = Args::parse("infer", "Fill-mask demo: prints the top-k tokens for each [MASK] in the text.", specs, argc, argv, 2);
  if (!args) return 0;
  const std::string dir = args->require("model");
  const std::string text = args->require("text");
  const int64_t top_k = args->get_int("top-k");
  if (top_k < 1) throw Error("--top-k must be at least 1, got ", top_k);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw Error("--text is empty", Hint("give a sentence, e.g. --text \"Paris is the [MASK] of France.\""));

  Context ctx({.num_threads = int(args->get_int("threads")), .device = device_of(*args)});
  const std::string precision = inference_precision_of(*args, ctx.device());
  setup_device(ctx, precision);
  BertModel model = BertModel::load(dir);
  model.to(ctx, inference_dtype(precision));  // CPU bf16: Linear products in bf16
  text::WordPieceTokenizer tok = load_tokenizer(dir, model.config().vocab_size);
  const int64_t max_len = model.config().max_position_embeddings;
  std::optional<std::string> pair;
  if (args->has("pair")) pair = args->get("pair");
  text::Encoding enc;
  if (args->has("no-truncate")) {
    try {
      enc = tok.encode(text, pair, int(max_len), text::Truncation::do_not_truncate);
    } catch (const Error& e) {
      throw Error("the input is longer than the model's ", max_len, " positions: ", e.what(),
                  Hint("shorten the text, or drop --no-truncate to truncate it with a warning"));
    }
  } else {
    enc = tok.encode(text, pair, int(max_len), text::Truncation::longest_first);
  }
  if (enc.num_truncated > 0)
    std::fprintf(stderr, "unmask infer: warning: input truncated by %zu tokens to the model's %lld positions (--no-truncate makes this an error)\n",
                 enc.num_truncated, (long long)max_len);
  const int64_t T = int64_t(enc.ids.size());
  for (int32_t id : enc.ids)
    if (id >= model.config().vocab_size)
      throw Error("token id ", id, " from ", dir, "/vocab.txt is outside the model's vocab_size ", model.config().vocab_size,
                  Hint("vocab.txt and config.json disagree"));

  BertInput in;
  in.input_ids = to_i64(enc.ids);
  in.token_type_ids = to_i64(enc.type_ids);
  in.cu_seqlens = Tensor::empty({2}, DType::i32);
  in.cu_seqlens.data<int32_t>()[0] = 0;
  in.cu_seqlens.data<int32_t>()[1] = int32_t(T);
  ForwardOptions one_shot;
  one_shot.pack_weights = false;  // a single forward: packing the weights would cost more than it saves
  BertOutputs out = model.forward(ctx, in, one_shot);
  outputs_to_host(out);

  if (args->has("dump")) {
    const std::string od = args->get("dump");
    make_dump_dir(od);
    dump(od, "input_ids", in.input_ids);
    dump(od, "token_type_ids", in.token_type_ids);
    dump(od, "last_hidden_state", out.last_hidden_state);
    if (out.pooler_output.defined()) dump(od, "pooler_output", out.pooler_output.view({model.config().hidden_size}));
    dump(od, "mlm_logits", out.mlm_logits);
    if (out.nsp_logits.defined()) dump(od, "nsp_logits", out.nsp_logits.view({2}));
  }

  // Print: tokens, then the predictions for every [MASK].
  std::printf("tokens (%lld):", (long long)T);
  for (int32_t id : enc.ids) std::printf(" %s", tok.vocab().token(id).c_str());
  std::printf("\n");
  const int32_t mask_id = tok.vocab().mask_id();
  int masks = 0;
  // A fine-tuned classifier or tagger: its class, or every token's tag, with the probability.
  const std::vector<std::string> labels = finetune::model_labels(model.config());
  auto best_of = [&](const float* row) {
    const int64_t L = model.config().num_labels;
    const float mx = *std::max_element(row, row + L);
    double sum = 0;
    for (int64_t k = 0; k < L; ++k) sum += std::exp(double(row[k] - mx));
    const int64_t b = std::max_element(row, row + L) - row;
    return std::pair<std::string, double>(labels[size_t(b)], 1.0 / sum);
  };
  if (out.seqcls_logits.defined()) {
    const auto [label, p] = best_of(out.seqcls_logits.data<float>());
    std::printf("class: %s (probability %.4f)\n", label.c_str(), p);
  }
  if (out.tokcls_logits.defined()) {
    std::printf("tags:");
    for (int64_t t = 0; t < T; ++t) {
      const auto [label, p] = best_of(out.tokcls_logits.data<float>() + t * model.config().num_labels);
      std::printf(" %s/%s(%.2f)", tok.vocab().token(enc.ids[size_t(t)]).c_str(), label.c_str(), p);
    }
    std::printf("\n");
  }
  if (!out.mlm_logits.defined()) {
    if (!out.seqcls_logits.defined() && !out.tokcls_logits.defined())
      std::printf("this checkpoint has no MLM head (cls.predictions.*): no fill-mask predictions; use --dump for the hidden states\n");
  } else {
    const int64_t V = model.config().vocab_size;
    for (int64_t t = 0; t < T; ++t) {
      if (enc.ids[t] != mask_id) continue;
      ++masks;
      const float* row = out.mlm_logits.data<float>() + t * V;
      const float mx = *std::max_element(row, row + V);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v] - mx));
      std::vector<int32_t> idx(V);
      std::iota(idx.begin(), idx.end(), 0);
      const int64_t k = std::min(top_k, V);
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      std::printf("[MASK] at position %lld:\n", (long long)t);
      for (int64_t i = 0; i < k; ++i) {
        const int32_t id = idx[i];
        const std::string& name = id < tok.vocab().size() ? tok.vocab().token(id) : std::to_string(id);
        std::printf("  %2lld. %-16s %.4f\n", (long long)(i + 1), name.c_str(), std::exp(double(row[id] - mx)) / sum);
      }
    }
    if (masks == 0 && enc.num_truncated > 0) {
      const text::Encoding whole = tok.encode(text, pair, 1 << 30, text::Truncation::do_not_truncate);
      if (std::count(whole.ids.begin(), whole.ids.end(), mask_id) > 0)
        throw Error("every [MASK] of the text lies past the model's ", max_len,
                    " positions and was cut off by truncation: nothing to fill",
                    Hint("shorten the text so the [MASK] falls within the first " + std::to_string(max_len) + " tokens"));
    }
    if (masks == 0) std::printf("no [MASK] token in the text: nothing to fill (write [MASK] where a word should be predicted)\n");
  }
  if (out.nsp_logits.defined()) {
    const float* n = out.nsp_logits.data<float>();
    const double p_next = 1.0 / (1.0 + std::exp(double(n[1] - n[0])));
    std::printf("next-sentence probability (B follows A): %.4f\n", p_next);
  }
  return 0;
}

int cmd_embed(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "Hugging Face model directory (any head; the encoder is used)", ""},
      {"input", "FILE", "UTF-8 text, one text per line (empty lines are embedded too)", ""},
      {"output", "X.npy", "f32 [texts, hidden_size] embeddings, in input order", ""},
      {"pooling", "cls|mean", "cls: the [CLS] row; mean: the mean of every token row ([CLS]/[SEP] included)", "cls"},
      {"batch", "N", "texts per forward (packed: no work on padding)", "32"},
      {"max-seq", "N", "truncate texts to N tokens (0 = the model's positions)", "0"},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      cpu_precision_option(),
  };
  auto args = Args::parse("embed", "Writes a sentence embedding for every line of a text file as one .npy matrix.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const std::string dir = args->require("model"), input = args->require("input"), output = args->require("output");
  const std::string pooling = args->get("pooling");
  if (pooling != "cls" && pooling != "mean") throw Error("--pooling must be cls or mean, got '", pooling, "'");
  const int64_t batch = args->get_int("batch"), max_seq = args->get_int("max-seq");
  if (batch < 1) throw Error("--batch must be >= 1, got ", batch);
  if (max_seq < 0) throw Error("--max-seq must be >= 0, got ", max_seq);
  if (std::filesystem::exists(output)) throw Error(output, " exists", Hint("choose another --output or remove it first"));
  std::vector<std::string> lines;
  {
    const std::string text = io::read_file(input);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      std::string line = text.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(std::move(line));
      pos = nl + 1;
    }
  }
  if (lines.empty()) throw Error(input, " is empty: no text to embed");
  Context ctx({.num_threads = int(args->get_int("threads"))});
  BertModel model = BertModel::load(dir);
  apply_cpu_precision(*args, ctx, model);
  const text::WordPieceTokenizer tok = load_tokenizer(dir, model.config().vocab_size);
  const auto t0 = std::chrono::steady_clock::now();
  const EmbedResult r = embed_texts(ctx, model, tok, lines,
                                    {.pooling = pooling == "mean" ? Pooling::mean : Pooling::cls, .batch = batch,
                                     .max_length = max_seq});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io::write_npy(output, r.embeddings);
  std::printf("embed: %zu texts (%lld tokens, %lld truncated), %s pooling -> %s [%zu, %lld] in %.2f s (%.1f texts/s)\n",
              lines.size(), (long long)r.tokens, (long long)r.truncated, pooling.c_str(), output.c_str(), lines.size(),
              (long long)model.config().hidden_size, s, s > 0 ? double(lines.size()) / s : 0.0);
  return 0;
}

int cmd_forward(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"model", "DIR", "Hugging Face model directory", ""},
      {"input-ids", "FILE", "int64 or int32 .npy of shape [B, T]", ""},
      {"token-type-ids", "FILE", ".npy [B, T] (default zeros)", ""},
      {"attention-mask", "FILE", ".npy [B, T], 1 = real token (default all ones)", ""},
      {"mode", "padded|packed", "padded: compute on [B, T]; packed: drop padding and run cu_seqlens", "packed"},
      {"dump", "OUTDIR", "directory for the output .npy files", ""},
      {"threads", "N", "CPU threads (0 = all cores)", "0"},
      device_option(),
      {"precision", "fp32|tf32|bf16|fp16", "CUDA: bf16/fp16 weights and activations, or TF32 GEMMs (outputs are written as f32); CPU: bf16 Linear products on a bf16 matrix unit", "fp32"},
  };
  auto args = Args::parse("forward", "Runs a batch of token ids and dumps every output as .npy in the padded [B, T, ...] layout.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const std::string dir = args->require("model");
  const std::string od = args->require("dump");
  const std::string mode = args->get("mode");
  if (mode != "padded" && mode != "packed") throw Error("--mode must be padded or packed, got '", mode, "'");
  Tensor ids = io::read_npy(args->require("input-ids"));
  if (ids.ndim() != 2) throw Error("--input-ids must be a 2-D [B, T] array, got ", ids.describe());
  const int64_t B = ids.size(0), T = ids.size(1);
  auto to_i64_2d = [&](const Tensor& t, const char* what) {
    if (t.shape() != ids.shape()) throw Error(what, " must have shape ", ids.shape().str(), " like --input-ids, got ", t.describe());
    Tensor o = Tensor::empty(t.shape(), DType::i64);
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (t.dtype()) {
        case DType::i64: o.data<int64_t>()[i] = t.data<int64_t>()[i]; break;
        case DType::i32: o.data<int64_t>()[i] = t.data<int32_t>()[i]; break;
        case DType::u8: case DType::boolean: o.data<int64_t>()[i] = static_cast<const uint8_t*>(t.raw())[i]; break;
        default: throw Error(what, " must be an integer array, got ", t.describe());
      }
    }
    return o;
  };
  ids = to_i64_2d(ids, "--input-ids");
  Tensor tt = args->has("token-type-ids") ? to_i64_2d(io::read_npy(args->get("token-type-ids")), "--token-type-ids")
                                          : Tensor::zeros({B, T}, DType::i64);
  Tensor mask = args->has("attention-mask") ? to_i64_2d(io::read_npy(args->get("attention-mask")), "--attention-mask")
                                            : Tensor();
  if (!mask.defined()) {
    mask = Tensor::empty({B, T}, DType::i64);
    std::fill(mask.data<int64_t>(), mask.data<int64_t>() + B * T, 1);
  }
  // Real tokens must be a prefix of each row (right padding), as the packed layout assumes.
  std::vector<int32_t> lengths(B);
  for (int64_t b = 0; b < B; ++b) {
    int64_t len = 0;
    while (len < T && mask.data<int64_t>()[b * T + len]) ++len;
    for (int64_t t = len; t < T; ++t)
      if (mask.data<int64_t>()[b * T + t])
        throw Error("--attention-mask row ", b, " has a real token at ", t, " after padding at ", len, Hint("use right padding"));
    if (len == 0) throw Error("--attention-mask row ", b, " has no real token");
    lengths[b] = int32_t(len);
  }

  Context ctx({.num_threads = int(args->get_int("threads")), .device = device_of(*args)});
  const std::string precision = inference_precision_of(*args, ctx.device());
  setup_device(ctx, precision);
  BertModel model = BertModel::load(dir);
  model.to(ctx, inference_dtype(precision));  // CPU bf16: Linear products in bf16
  BertInput in;
  BertOutputs out;
  if (mode == "padded") {
    in.input_ids = ids;
    in.token_type_ids = tt;
    in.attention_mask = mask;
    out = model.forward(ctx, in);
    outputs_to_host(out);
  } else {
    int64_t N = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
    in.input_ids = Tensor::empty({N}, DType::i64);
    in.token_type_ids = Tensor::empty({N}, DType::i64);
    in.cu_seqlens = Tensor::empty({B + 1}, DType::i32);
    int32_t* cu = in.cu_seqlens.data<int32_t>();
    cu[0] = 0;
    for (int64_t b = 0, r = 0; b < B; ++b) {
      for (int64_t t = 0; t < lengths[b]; ++t, ++r) {
        in.input_ids.data<int64_t>()[r] = ids.data<int64_t>()[b * T + t];
        in.token_type_ids.data<int64_t>()[r] = tt.data<int64_t>()[b * T + t];
      }
      cu[b + 1] = cu[b] + lengths[b];
    }
    out = model.forward(ctx, in);
    outputs_to_host(out);
    // Scatter packed rows back to [B, T, D] with zeros at padding.
    auto unpack = [&](Tensor& t) {
      if (!t.defined()) return;
      const int64_t D = t.ndim() == 1 ? 1 : t.size(1);
      Tensor o = Tensor::zeros(D == 1 && t.ndim() == 1 ? Shape{B, T} : Shape{B, T, D}, DType::f32);
      for (int64_t b = 0; b < B; ++b)
        std::copy(t.data<float>() + cu[b] * D, t.data<float>() + cu[b + 1] * D, o.data<float>() + b * T * D);
      t = o;
    };
    unpack(out.last_hidden_state);
    unpack(out.mlm_logits);
    unpack(out.qa_start_logits);
    unpack(out.qa_end_logits);
    unpack(out.tokcls_logits);
  }
  make_dump_dir(od);
  dump(od, "last_hidden_state", out.last_hidden_state);
  dump(od, "pooler_output", out.pooler_output);
  dump(od, "mlm_logits", out.mlm_logits);
  dump(od, "nsp_logits", out.nsp_logits);
  dump(od, "qa_start_logits", out.qa_start_logits);
  dump(od, "qa_end_logits", out.qa_end_logits);
  dump(od, "seqcls_logits", out.seqcls_logits);
  dump(od, "tokcls_logits", out.tokcls_logits);
  std::printf("wrote outputs for %lld sequences (%s) to %s\n", (long long)B, mode.c_str(), od.c_str());
  return 0;
}

}  // namespace unmask::cli
