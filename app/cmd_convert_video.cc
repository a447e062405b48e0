// app/cmd_convert_video.cc: `unmask convert-videomae`, a VideoMAE checkpoint in any supported form
// (torch.save .pth/.bin of VideoMAE v1/v2/V-SWIFT, a safetensors file or model directory, original
// or Hugging Face names) -> a safetensors model directory in the chosen naming + config.json.
#include <cstdio>
#include <string>

#include "cli.h"
#include "unmask/error.h"
#include "models/videomae/checkpoint.h"

namespace unmask::cli {

int cmd_convert_videomae(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"in", "PATH", "checkpoint: .pth/.bin (torch.save), .safetensors, or a model directory", ""},
      {"output", "DIR", "output directory (model.safetensors + config.json); replaced atomically", ""},
      {"to", "NAMING", "hf (transformers VideoMAE names) or original (VideoMAE v1/v2/V-SWIFT names)", ""},
      {"config", "NAME",
       "model size: from-file (the config.json next to the input), tiny, small, base, large, huge, giant", "from-file"},
      {"frames", "N", "clip length recorded in config.json (default: the checkpoint's, or the preset's 16)", ""},
      {"img-size", "N", "resolution recorded in config.json (default: the checkpoint's, or the preset's)", ""},
  };
  auto args = Args::parse("convert-videomae",
                          "Converts a VideoMAE checkpoint between the original names (blocks.i.attn.qkv.weight, "
                          "q_bias, v_bias) and the Hugging Face names (videomae.encoder.layer.i.attention."
                          "attention.query/key/value, q_bias, v_bias). Reads torch.save files without Python. "
                          "Writes model.safetensors and config.json (HF fields + the exact unmask config).",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const std::string in = args->require("in"), out = args->require("output"), to = args->require("to");
  if (to != "hf" && to != "original") throw Error("--to must be hf or original, got '", to, "'");
  const video::VideoMAENaming naming = to == "hf" ? video::VideoMAENaming::hf : video::VideoMAENaming::original;

  video::VideoMAECheckpoint ck = video::read_videomae_checkpoint(in);
  const std::string which = args->get("config");
  VideoMAEConfig config;
  if (which == "from-file") {
    if (!ck.config)
      throw Error("convert-videomae: ", in, " has no config.json beside it, so the model size is unknown",
                  Hint("pass --config tiny|small|base|large|huge|giant (the size the checkpoint was trained with)"));
    config = ck.config->config;
  } else {
    config = VideoMAEConfig::preset(which);
    if (ck.config && (ck.config->config.dim != config.dim || ck.config->config.depth != config.depth ||
                      ck.config->config.heads != config.heads))
      throw Error("convert-videomae: --config ", which, " (dim ", config.dim, ", depth ", config.depth, ", heads ",
                  config.heads, ") contradicts the checkpoint's config.json (dim ", ck.config->config.dim, ", depth ",
                  ck.config->config.depth, ", heads ", ck.config->config.heads, ")", Hint("use --config from-file"));
    if (ck.config) config.num_frames = ck.config->config.num_frames, config.img_size = ck.config->config.img_size;
  }
  if (args->has("frames")) config.num_frames = args->get_int("frames");
  if (args->has("img-size")) config.img_size = args->get_int("img-size");

  std::printf("convert-videomae: read %lld tensors from %s (%s, %s names): %zu in original names\n",
              (long long)ck.stored_tensors, ck.source.c_str(), ck.format.c_str(),
              ck.naming == video::VideoMAENaming::hf ? "HF" : "original", ck.tensors.size());
  for (const auto& n : ck.notes) std::printf("  %s\n", n.c_str());
  if (ck.config)
    for (const auto& n : ck.config->notes) std::printf("  %s\n", n.c_str());
  std::vector<std::string> notes;
  video::save_videomae_tensors(out, config, ck.tensors, naming, 0, &notes);
  for (const auto& n : notes) std::printf("  %s\n", n.c_str());
  std::printf(
      "convert-videomae: wrote %s/model.safetensors (%s names) and config.json (dim %lld, depth %lld, "
      "heads %lld, %lld frames of %lldpx)\n",
      out.c_str(), to.c_str(), (long long)config.dim, (long long)config.depth, (long long)config.heads,
      (long long)config.num_frames, (long long)config.img_size);
  return 0;
}

}  // namespace unmask::cli
