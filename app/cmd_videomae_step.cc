// app/cmd_videomae_step.cc: `unmask videomae-step`, one VideoMAE forward+backward on a random
// model, all written to safetensors for the PyTorch parity test (tests/python/videomae_parity.py):
// inputs.safetensors, params.safetensors and grads.safetensors (VideoMAE state-dict names), and the
// loss as one JSON line on stdout.
//   pretraining (default): random clips and a tube mask; inputs = videos, mask
//   --classify K: the fine-tuning model, random labels mixed by mixup/cutmix + label smoothing
//                 (--mixup), drop path (--drop-path); inputs = the mixed videos, targets, the drop
//                 path scales actually used [depth, 2, B], logits
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli.h"
#include "data/rng.h"
#include "io/safetensors.h"
#include "unmask/error.h"
#include "unmask/videomae.h"
#include "data/video/masking.h"

namespace unmask::cli {

int cmd_videomae_step(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"preset", "NAME", "model size: tiny, small, base, large, huge, giant", "tiny"},
      {"batch", "N", "clips", "2"},
      {"masked", "N", "masked spatial positions per clip (tube mask over all time slots)", "2"},
      {"seed", "N", "seed of the weights, clips and masks", "1"},
      {"perturb", "", "add U(-0.1, 0.1) to biases, LayerNorm weights and the mask token (exercises every gradient)", ""},
      {"output", "DIR", "output directory (created)", ""},
      {"classify", "K", "fine-tuning model with K classes instead of the pretraining model", "0"},
      {"drop-path", "RATE", "--classify: drop path rate (linear over depth)", "0"},
      {"mixup", "", "--classify: mixup 0.8 / cutmix 1.0 / smoothing 0.1 (else smoothing 0.1 only)", ""},
      {"decoder-mask-ratio", "R", "pretraining: VideoMAE v2 running-cell decoder mask with this ratio (0 = v1)", "0"},
  };
  auto parsed = Args::parse("videomae-step", "one VideoMAE pretraining step; dumps inputs, params, grads",
                            specs, argc, argv, 2);
  if (!parsed) return 0;
  const Args& a = *parsed;
  const std::string out = a.require("output");
  const VideoMAEConfig config = VideoMAEConfig::preset(a.get("preset"));
  const int64_t B = a.get_int("batch"), seed = a.get_int("seed"), masked = a.get_int("masked");
  const int64_t HW = config.grid_hw() * config.grid_hw(), Np = config.num_patches();
  if (B < 1) throw Error("--batch must be at least 1, got ", B);
  if (masked < 1 || masked >= HW)
    throw Error("--masked must be in [1, ", HW - 1, "] (spatial positions per time slot), got ", masked);

  data::Rng rng(uint64_t(seed) * 7919 + 17);
  auto perturb = [&](std::vector<Param>& params) {
    if (!a.has("perturb")) return;
    for (Param& p : params) {
      if (p.value.ndim() == 2 || p.value.ndim() == 5) continue;  // weights keep their init
      float* d = p.value.data<float>();
      for (int64_t i = 0; i < p.value.numel(); ++i) d[i] += float(0.2 * rng.uniform() - 0.1);
    }
  };
  auto write_params = [&](std::vector<Param>& params) {
    std::vector<std::pair<std::string, Tensor>> values, grads;
    for (const Param& p : params) {
      values.emplace_back(p.name, p.value);
      grads.emplace_back(p.name, p.grad);
    }
    io::write_safetensors(out + "/params.safetensors", values);
    io::write_safetensors(out + "/grads.safetensors", grads);
  };
  Tensor videos = Tensor::empty({B, config.channels, config.num_frames, config.img_size, config.img_size}, DType::f32);
  Context ctx;

  if (const int64_t K = a.get_int("classify"); K > 0) {
    VideoMAEClassifier model = VideoMAEClassifier::random(config, K, uint64_t(seed));
    perturb(model.params());
    for (Param& p : model.params())  // the head starts near zero (init_scale); give it a real signal
      if (p.name == "head.weight")
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = float(0.2 * rng.uniform() - 0.1);
    for (int64_t i = 0; i < videos.numel(); ++i) videos.data<float>()[i] = float(4.0 * rng.uniform() - 2.0);
    std::vector<int64_t> labels(static_cast<size_t>(B));
    for (auto& l : labels) l = int64_t(rng.below(uint64_t(K)));
    MixupOptions mo;
    if (!a.has("mixup")) mo.mixup_alpha = mo.cutmix_alpha = 0.0f;
    const MixupResult mix = mixup_cutmix(videos, labels, K, mo, uint64_t(seed));
    VideoMAEClassifyOptions co;
    co.drop_path_rate = float(a.get_double("drop-path"));
    co.seed = uint64_t(seed);
    model.zero_grad(ctx);
    const VideoMAEClassifyStats st = model.step(ctx, videos, mix.targets, co);
    std::filesystem::create_directories(out);
    io::write_safetensors(out + "/inputs.safetensors", {{"videos", videos},
                                                        {"targets", mix.targets},
                                                        {"drop_scales", st.drop_scales},
                                                        {"logits", st.logits}});
    write_params(model.params());
    std::printf("{\"loss\": %.9g, \"clips\": %lld, \"lam\": %.9g, \"cutmix\": %s}\n", st.loss, (long long)B,
                mix.lam, mix.cutmix ? "true" : "false");
    return 0;
  }

  VideoMAEPretrainModel model = VideoMAEPretrainModel::random(config, uint64_t(seed));
  perturb(model.params());
  for (int64_t i = 0; i < videos.numel(); ++i) videos.data<float>()[i] = float(4.0 * rng.uniform() - 2.0);
  // Tube mask: `masked` random spatial positions per clip, the same at every time slot.
  Tensor mask = Tensor::zeros({B, Np}, DType::u8);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> pos(static_cast<size_t>(HW));
    for (int64_t i = 0; i < HW; ++i) pos[size_t(i)] = i;
    rng.shuffle(pos.data(), HW);
    for (int64_t k = 0; k < masked; ++k)
      for (int64_t t = 0; t < config.grid_t(); ++t)
        static_cast<uint8_t*>(mask.raw())[b * Np + t * HW + pos[size_t(k)]] = 1;
  }

  model.zero_grad(ctx);
  VideoMAEStepOptions opt;
  if (const double dr = a.get_double("decoder-mask-ratio"); dr > 0)
    opt.decoder_mask = video::running_cell_mask_batch({config.grid_t(), config.grid_hw(), config.grid_hw()}, dr,
                                                      uint64_t(seed), 0, B);
  const VideoMAEStepStats st = model.pretrain_step(ctx, videos, mask, opt);

  std::filesystem::create_directories(out);
  std::vector<std::pair<std::string, Tensor>> inputs = {{"videos", videos}, {"mask", mask}};
  if (opt.decoder_mask.defined()) inputs.emplace_back("decoder_mask", opt.decoder_mask);
  io::write_safetensors(out + "/inputs.safetensors", inputs);
  write_params(model.params());
  std::printf("{\"loss\": %.9g, \"clips\": %lld, \"masked_tokens\": %lld, \"visible_tokens\": %lld, "
              "\"decoded_tokens\": %lld, \"loss_tokens\": %lld}\n",
              st.loss, (long long)st.clips, (long long)st.masked_tokens, (long long)st.visible_tokens,
              (long long)st.decoded_tokens, (long long)st.loss_tokens);
  return 0;
}

}  // namespace unmask::cli
