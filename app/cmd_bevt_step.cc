// app/cmd_bevt_step.cc: `unmask bevt-step`, one BEVT pretraining forward + backward (drop path as
// asked, no dropout) with everything written for an outside check (tests/python/bevt_parity.py):
//   inputs.safetensors    videos, video_frames, video_masks, images, image_frames, image_masks,
//                         video_ids, image_ids (the targets: -1 for frames not tokenized),
//                         drop_video, drop_image ([blocks, 2, B] drop-path scales)
//   params.safetensors    every trainable tensor under its BEVT name (what was run)
//   grads.safetensors     every gradient under its BEVT name
//   tokenizer.safetensors the tokenizer (DALL-E names)
// and one JSON line on stdout (each stream's loss, masked tokens and accuracy).
// Weights come from --weights (BEVT names) or are drawn from --seed; the batch from --inputs (a
// safetensors file of the tensors above) or is drawn from --seed.
// --classify K: one step of the fine-tuning model instead (Video Swin + fc_cls, smoothed one-hot
// targets, drop path as asked): inputs.safetensors holds videos, targets, drop_scales, logits.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "bevt_common.h"
#include "cli.h"
#include "data/video/block_masks.h"
#include "io/safetensors.h"
#include "models/bevt/checkpoint.h"
#include "models/bevt/classify.h"
#include "models/bevt/pretrain.h"
#include "unmask/error.h"

namespace unmask::cli {

namespace {

Tensor masks_tensor(const std::vector<uint8_t>& m, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::u8);
  UNMASK_CHECK(int64_t(m.size()) == t.numel(), "bevt-step: ", m.size(), " mask cells for ", shape.str());
  std::copy(m.begin(), m.end(), static_cast<uint8_t*>(t.raw()));
  return t;
}

Tensor ids_tensor(const std::vector<int32_t>& ids) {
  Tensor t = Tensor::empty({int64_t(ids.size())}, DType::i32);
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

std::vector<uint8_t> u8_of(const io::SafeTensorsFile& f, const std::string& name) {
  UNMASK_CHECK(f.find(name), "bevt-step: ", f.path(), " has no tensor '", name, "'");
  const Tensor t = f.tensor(name);
  UNMASK_CHECK(t.dtype() == DType::u8, "bevt-step: ", f.path(), ": ", name, " must be u8, is ", t.describe());
  const uint8_t* p = static_cast<const uint8_t*>(t.raw());
  return std::vector<uint8_t>(p, p + t.numel());
}

Tensor f32_of(const io::SafeTensorsFile& f, const std::string& name) {
  UNMASK_CHECK(f.find(name), "bevt-step: ", f.path(), " has no tensor '", name, "'",
               Hint("--inputs needs videos, video_frames, video_masks, images, image_frames, image_masks"));
  const Tensor t = f.tensor(name);
  UNMASK_CHECK(t.dtype() == DType::f32, "bevt-step: ", f.path(), ": ", name, " must be f32, is ", t.describe());
  Tensor o = Tensor::empty(t.shape(), DType::f32);
  o.copy_from(t);
  return o;
}

void perturb(std::vector<Param>& params, std::mt19937_64& gen) {
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (Param& p : params) {
    const bool matrix = p.value.ndim() >= 2 && p.name.find("relative_position") == std::string::npos;
    if (matrix) continue;  // weights keep their init
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] += u(gen);
  }
}

void write_params(const std::string& out, const std::vector<Param>& params) {
  std::vector<std::pair<std::string, Tensor>> values, grads;
  for (const Param& p : params) values.emplace_back(p.name, p.value), grads.emplace_back(p.name, p.grad);
  io::write_safetensors(out + "/params.safetensors", values);
  io::write_safetensors(out + "/grads.safetensors", grads);
}

// --classify K: one fine-tuning step of the Video Swin classifier.
int classify_step(const Args& a, const bevt::SwinConfig& config, int64_t K, uint64_t seed, std::mt19937_64& gen,
                  const std::string& out) {
  bevt::SwinClassifier model = bevt::SwinClassifier::random(config, K, seed);
  if (a.has("weights")) {
    bevt::BevtLoadOptions lo;
    lo.allow_missing_prefixes = {"cls_head."};
    lo.window = config.window;
    std::fprintf(stderr, "%s\n", bevt::load_bevt(a.get("weights"), model.params(), lo).summary().c_str());
  } else if (a.has("perturb")) {
    perturb(model.params(), gen);
    std::normal_distribution<float> n(0.0f, 0.1f);  // a head with a real signal
    for (Param& p : model.params())
      if (p.name == "cls_head.fc_cls.weight")
        for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data<float>()[i] = n(gen);
  }
  const int64_t B = a.get_int("clips"), T = a.get_int("frames"), S = a.get_int("crop");
  if (B < 1 || T < 2 || S < 32) throw Error("--classify needs --clips >= 1, --frames >= 2 and --crop >= 32");
  gen.seed(seed * 104729 + 3);  // the batch does not depend on whether the weights were drawn or loaded
  Tensor videos = Tensor::empty({B, 3, T, S, S}, DType::f32);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < videos.numel(); ++i) videos.data<float>()[i] = n(gen);
  std::vector<int64_t> labels(static_cast<size_t>(B));
  for (auto& l : labels) l = int64_t(gen() % uint64_t(K));
  MixupOptions mo;
  mo.mixup_alpha = mo.cutmix_alpha = 0.0f;  // smoothed one-hot targets
  const MixupResult mix = mixup_cutmix(videos, labels, K, mo, seed);
  Context ctx;
  VideoMAEClassifyOptions co;
  co.drop_path_rate = float(a.get_double("drop-path"));
  co.seed = seed;
  model.zero_grad(ctx);
  const VideoMAEClassifyStats st = model.step(ctx, videos, mix.targets, co);
  std::filesystem::create_directories(out);
  io::write_safetensors(out + "/inputs.safetensors",
                        {{"videos", videos}, {"targets", mix.targets}, {"drop_scales", st.drop_scales}, {"logits", st.logits}});
  write_params(out, model.params());
  std::printf("{\"loss\": %.9g, \"clips\": %lld}\n", st.loss, (long long)B);
  return 0;
}

}  // namespace

int cmd_bevt_step(int argc, char** argv) {
  std::vector<OptionSpec> specs = bevt_model_specs();
  for (const OptionSpec& s : bevt_tokenizer_specs()) specs.push_back(s);
  const std::vector<OptionSpec> own = {
      {"weights", "PATH", "BEVT weights (model directory, .safetensors or .pth); default: drawn from --seed", ""},
      {"inputs", "FILE", "the batch as a safetensors file (see the top of cmd_bevt_step.cc); default: drawn", ""},
      {"clips", "N", "drawn batch: clips", "1"},
      {"frames", "T", "drawn batch: frames per clip (even)", "4"},
      {"crop", "S", "drawn batch: clip side (a multiple of 32)", "64"},
      {"images", "N", "drawn batch: images", "2"},
      {"image-size", "S", "drawn batch: image side", "128"},
      {"seed", "N", "seed of the weights, batch and drop path", "1"},
      {"perturb", "", "add U(-0.1, 0.1) to biases, LayerNorm weights and the mask token (exercises every gradient)", ""},
      {"drop-path", "RATE", "stochastic depth rate", "0"},
      {"all-positions", "", "evaluate the neck and head at every position (default: the masked ones)", ""},
      {"classify", "K", "the fine-tuning model (Video Swin + fc_cls, K classes) on --clips drawn clips with smoothed "
                        "one-hot targets, instead of the pretraining step", "0"},
      {"output", "DIR", "output directory (created)", ""},
  };
  specs.insert(specs.end(), own.begin(), own.end());
  auto parsed = Args::parse("bevt-step", "one BEVT pretraining step; dumps inputs, params, grads", specs, argc, argv, 2);
  if (!parsed) return 0;
  const Args& a = *parsed;
  const std::string out = a.require("output");
  const bevt::SwinConfig config = bevt_swin_config(a);
  const int64_t vocab = a.get_int("vocab");
  const uint64_t seed = uint64_t(a.get_int("seed"));

  std::mt19937_64 gen(seed * 7919 + 17);
  if (const int64_t K = a.get_int("classify"); K > 0) return classify_step(a, config, K, seed, gen, out);
  bevt::BevtPretrainModel model = bevt::BevtPretrainModel::random(config, vocab, seed);
  if (a.has("weights")) {
    bevt::BevtLoadOptions lo;
    lo.window = config.window;
    const bevt::BevtLoadReport r = bevt::load_bevt(a.get("weights"), model.params(), lo);
    std::fprintf(stderr, "%s\n", r.summary().c_str());
  } else if (a.has("perturb")) {
    perturb(model.params(), gen);
  }
  std::string tokenizer_what;
  bevt::DalleEncoder tokenizer = bevt_tokenizer(a, vocab, seed + 2, &tokenizer_what);

  bevt::BevtBatch batch;
  gen.seed(seed * 104729 + 3);  // the batch does not depend on whether the weights were drawn or loaded
  if (a.has("inputs")) {
    const io::SafeTensorsFile f = io::SafeTensorsFile::open(a.get("inputs"));
    if (!f.find("videos") && !f.find("images"))
      throw Error("bevt-step: ", f.path(), " holds neither 'videos' nor 'images'",
                  Hint("--inputs needs videos, video_frames, video_masks and / or images, image_frames, image_masks"));
    if (f.find("videos")) {  // a stream is optional, its three tensors are not
      batch.videos = f32_of(f, "videos"), batch.video_frames = f32_of(f, "video_frames");
      batch.video_masks = u8_of(f, "video_masks");
    }
    if (f.find("images")) {
      batch.images = f32_of(f, "images"), batch.image_frames = f32_of(f, "image_frames");
      batch.image_masks = u8_of(f, "image_masks");
    }
  } else {
    const int64_t Bv = a.get_int("clips"), T = a.get_int("frames"), S = a.get_int("crop");
    const int64_t Bi = a.get_int("images"), Si = a.get_int("image-size");
    if (Bv < 0 || Bi < 0 || Bv + Bi == 0) throw Error("--clips and --images must be >= 0 and not both 0");
    if (T < 2 || T % 2 || S < 32 || S % 32 || Si < 32 || Si % 32)
      throw Error("--frames must be even and --crop, --image-size multiples of 32");
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.1f, 0.9f);
    // Pixels N(0, 1); the tokenizer's frames one random colour per 8 x 8 cell (one token each),
    // plus a little noise, so that cells differ and the ids vary from cell to cell.
    auto fill = [&](Tensor& t, bool cells) {
      float* d = t.data<float>();
      if (!cells) {
        for (int64_t i = 0; i < t.numel(); ++i) d[i] = n(gen);
        return;
      }
      const int64_t H = t.size(2), W = t.size(3);
      for (int64_t fc = 0; fc < t.size(0) * 3; ++fc) {
        std::vector<float> colour(static_cast<size_t>((H / 8) * (W / 8)));
        for (float& c : colour) c = u(gen);
        for (int64_t y = 0; y < H; ++y)
          for (int64_t x = 0; x < W; ++x)
            d[(fc * H + y) * W + x] = std::clamp(colour[size_t(y / 8 * (W / 8) + x / 8)] + 0.02f * n(gen), 0.1f, 0.9f);
      }
    };
    video::BlockMaskOptions mv;
    mv.height = mv.width = S / 16, mv.count = mv.height * mv.width / 2, mv.min_cells = 1;
    video::BlockMaskOptions mi = mv;
    mi.height = mi.width = Si / 16, mi.count = mi.height * mi.width / 2;
    if (Bv > 0) {
      batch.videos = Tensor::empty({Bv, 3, T, S, S}, DType::f32), fill(batch.videos, false);
      batch.video_frames = Tensor::empty({Bv * T, 3, S / 2, S / 2}, DType::f32), fill(batch.video_frames, true);
      for (int64_t i = 0; i < Bv; ++i) {
        const std::vector<uint8_t> m = video::bevt_tube_mask(mv, T / 2, seed, uint64_t(i));
        batch.video_masks.insert(batch.video_masks.end(), m.begin(), m.end());
      }
    }
    if (Bi > 0) {
      batch.images = Tensor::empty({Bi, 3, Si, Si}, DType::f32), fill(batch.images, false);
      batch.image_frames = Tensor::empty({Bi, 3, Si / 2, Si / 2}, DType::f32), fill(batch.image_frames, true);
      for (int64_t i = 0; i < Bi; ++i) {
        const std::vector<uint8_t> m = video::block_mask(mi, seed + 1, uint64_t(i));
        batch.image_masks.insert(batch.image_masks.end(), m.begin(), m.end());
      }
    }
  }

  Context ctx;
  bevt::BevtStepOptions so;
  so.drop_path_rate = a.get_double("drop-path");
  so.seed = seed;
  so.all_positions = a.has("all-positions");
  model.zero_grad(ctx);
  const bevt::BevtStepStats st = bevt::bevt_pretrain_step(ctx, model, &tokenizer, batch, so);

  std::filesystem::create_directories(out);
  std::vector<std::pair<std::string, Tensor>> inputs;
  if (batch.clips()) {
    const int64_t Bv = batch.clips(), T = batch.videos.size(2), h = batch.videos.size(3) / 16, w = batch.videos.size(4) / 16;
    inputs.emplace_back("videos", batch.videos);
    inputs.emplace_back("video_frames", batch.video_frames);
    inputs.emplace_back("video_masks", masks_tensor(batch.video_masks, {Bv, T / 2, h, w}));
    inputs.emplace_back("video_ids", ids_tensor(st.video_ids).view({Bv * T, h * w}));
    bevt::DropPathDraw d{so.drop_path_rate, seed, 0, 0};
    inputs.emplace_back("drop_video", bevt::drop_path_scales(config, d, Bv));
  }
  if (batch.image_count()) {
    const int64_t Bi = batch.image_count(), h = batch.images.size(2) / 16, w = batch.images.size(3) / 16;
    inputs.emplace_back("images", batch.images);
    inputs.emplace_back("image_frames", batch.image_frames);
    inputs.emplace_back("image_masks", masks_tensor(batch.image_masks, {Bi, h, w}));
    inputs.emplace_back("image_ids", ids_tensor(st.image_ids).view({Bi, h * w}));
    bevt::DropPathDraw d{so.drop_path_rate, seed, 1, 0};
    inputs.emplace_back("drop_image", bevt::drop_path_scales(config, d, Bi));
  }
  io::write_safetensors(out + "/inputs.safetensors", inputs);
  write_params(out, model.params());
  bevt::save_dalle_encoder(out + "/tokenizer.safetensors", tokenizer);
  std::fprintf(stderr, "tokenizer: %s; %lld frames tokenized\n", tokenizer_what.c_str(), (long long)st.tokenized_frames);
  std::printf("{\"loss\": %.9g, \"video_loss\": %.9g, \"image_loss\": %.9g, \"video_masked\": %lld, "
              "\"image_masked\": %lld, \"video_accuracy\": %.6g, \"image_accuracy\": %.6g, \"tokenized_frames\": %lld}\n",
              st.loss(), st.video.loss, st.image.loss, (long long)st.video.masked, (long long)st.image.masked,
              st.video.accuracy(), st.image.accuracy(), (long long)st.tokenized_frames);
  return 0;
}

}  // namespace unmask::cli
