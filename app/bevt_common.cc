// app/bevt_common.cc: see bevt_common.h.
#include "bevt_common.h"


#include "models/bevt/checkpoint.h"
#include "unmask/error.h"

namespace unmask::cli {

std::vector<OptionSpec> bevt_model_specs() {
  return {
      {"size", "NAME", "Video Swin size: tiny, small, base (BEVT's)", "base"},
      {"embed-dim", "C", "stage-1 width (overrides --size)", ""},
      {"depths", "A,B,C,D", "blocks per stage (overrides --size)", ""},
      {"heads", "A,B,C,D", "attention heads per stage (overrides --size)", ""},
      {"window", "D,H,W", "attention window (video; images use H x W)", "8,7,7"},
      {"vocab", "N", "the tokenizer's codes (DALL-E: 8192)", "8192"},
  };
}

bevt::SwinConfig bevt_swin_config(const Args& a) {
  bevt::SwinConfig c = bevt::SwinConfig::preset(a.get("size"));
  if (a.has("embed-dim")) c.embed_dim = a.get_int("embed-dim");
  auto list = [&](const char* name, auto& dst) {
    if (!a.has(name) && std::string(name) != "window") return;
    const std::vector<int64_t> v = a.get_int_list(name);
    if (v.size() != dst.size()) throw Error("--", name, " takes ", dst.size(), " numbers, got ", v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 1) throw Error("--", name, ": every number must be at least 1, got ", v[i]);
      dst[i] = v[i];
    }
  };
  list("depths", c.depths);
  list("heads", c.heads);
  list("window", c.window);
  if (c.embed_dim < 1) throw Error("--embed-dim must be at least 1, got ", c.embed_dim);
  for (int i = 0; i < 4; ++i)
    if (c.dim(i) % c.heads[size_t(i)] != 0)
      throw Error("stage ", i + 1, "'s width ", c.dim(i), " is not divisible by its ", c.heads[size_t(i)], " heads",
                  Hint("choose --heads dividing --embed-dim x 1, 2, 4, 8"));
  if (a.has("vocab") && a.get_int("vocab") < 2) throw Error("--vocab must be at least 2, got ", a.get_int("vocab"));
  return c;
}

std::vector<OptionSpec> bevt_data_specs(const char* default_workers) {
  return {
      {"data", "LIST", "videos: a list file (mmaction's 'path label', or any --list-format of prepare-video); "
                       "default: synthetic moving-shapes clips", ""},
      {"image-data", "PATH", "images: a 'path label' list or an ImageNet-style folder (class/img.JPEG); "
                             "default: synthetic images", ""},
      {"root", "DIR", "the folder relative paths in the lists start from (default: each list's folder)", ""},
      {"frame-interval", "N", "list videos: take every N-th frame (BEVT: 8)", "8"},
      {"workers", "N", "threads decoding a batch's samples; the next batch is made in the background while a step "
                       "runs (the samples are the same for any N)", default_workers},
  };
}

void read_bevt_data_options(const Args& a, video::BevtDataOptions& data) {
  data.frame_interval = a.get_int("frame-interval");
  if (data.frame_interval < 1) throw Error("--frame-interval must be at least 1");
  data.workers = a.get_int("workers");
  if (data.workers < 1 || data.workers > 256) throw Error("--workers must be in [1, 256], got ", data.workers);
}

std::vector<OptionSpec> bevt_tokenizer_specs() {
  return {
      {"tokenizer", "FILE", "the DALL-E encoder's weights (safetensors or torch.save of its state dict); "
                            "default: a random tokenizer of the sizes below", ""},
      {"tokenizer-hidden", "N", "random tokenizer: first group's width (DALL-E: 256)", "16"},
      {"tokenizer-blocks", "N", "random tokenizer: blocks per group (DALL-E: 2)", "1"},
  };
}

bevt::DalleEncoder bevt_tokenizer(const Args& a, int64_t vocab, uint64_t seed, std::string* what) {
  if (a.has("tokenizer")) {
    bevt::DalleEncoder e = bevt::load_dalle_encoder(a.get("tokenizer"));
    if (e.config.vocab != vocab)
      throw Error("the tokenizer ", a.get("tokenizer"), " has ", e.config.vocab, " codes, the model --vocab ", vocab,
                  Hint("give --vocab " + std::to_string(e.config.vocab)));
    if (what) *what = "DALL-E encoder from " + a.get("tokenizer");
    return e;
  }
  bevt::DalleEncoderConfig c;
  c.hidden = a.get_int("tokenizer-hidden"), c.blocks_per_group = a.get_int("tokenizer-blocks"), c.vocab = vocab;
  if (c.hidden < 1 || c.blocks_per_group < 1)
    throw Error("--tokenizer-hidden and --tokenizer-blocks must be at least 1");
  bevt::DalleEncoder e = bevt::DalleEncoder::random(c, seed);
  // The encoder's last features are ReLU outputs sharing a large common component, so a random
  // output layer picks the code whose weights sum highest almost everywhere; zero-mean rows leave
  // the content (colours, edges) to choose the code.
  const int64_t V = e.output.w.size(0), K = e.output.w.numel() / V;
  for (int64_t v = 0; v < V; ++v) {
    float* row = e.output.w.data<float>() + v * K;
    double mean = 0;
    for (int64_t k = 0; k < K; ++k) mean += row[k];
    for (int64_t k = 0; k < K; ++k) row[k] = float(row[k] - mean / double(K));
  }
  if (what)
    *what = "random tokenizer (hidden " + std::to_string(c.hidden) + ", " + std::to_string(c.blocks_per_group) +
            " blocks a group, " + std::to_string(vocab) + " codes; --tokenizer for DALL-E's)";
  return e;
}

}  // namespace unmask::cli
