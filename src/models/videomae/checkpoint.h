// models/videomae/checkpoint.h: save and load VideoMAE checkpoints in the original (VideoMAE v1 /
// v2 / V-SWIFT) and the Hugging Face naming, from safetensors directories, single safetensors
// files and PyTorch .pth/.bin files (io/torch_pickle.h), for any model that exposes its
// parameters under the original names (VideoMAEPretrainModel: encoder.* + decoder; the
// VideoMAEClassifier: patch_embed.*, blocks.i.*, fc_norm.*, head.*).
//
// A saved directory holds model.safetensors (names per `naming`) and config.json: the HF
// VideoMAEConfig fields (so transformers can read it; layer_norm_eps is the true 1e-6, not HF's
// default 1e-12) plus an "unmask" block with the exact VideoMAEConfig. It is written atomically.
//
// Loading (load_videomae) handles, in this order:
//   * the container: a directory (model.safetensors, its sharded index, or pytorch_model.bin, with
//     config.json), a .safetensors file, or a torch.save file ({'model': sd} / {'module': sd} unwrapped);
//   * prefixes: `backbone.` and a DDP `module.` on every name are stripped;
//   * naming: HF names are converted to the original ones (q/k/v fused, q_bias/v_bias kept);
//   * layout: a PRETRAIN checkpoint (encoder.*) loads into a fine-tune model (encoder.* -> top
//     level); its decoder, encoder_to_decoder, mask_token and encoder.norm (VideoMAE drops the
//     final norm under mean pooling) are reported as dropped. A fine-tune checkpoint loads the
//     encoder of a pretraining model (fc_norm / head dropped);
//   * positional tables: fixed sinusoid tables stored as buffers (V-SWIFT) are checked; for another
//     clip length / resolution they are regenerated (reported); a learned table is interpolated into
//     a model that has a `pos_embed` parameter, and is an error otherwise;
//   * the config: config.json (HF fields or the unmask block) is compared with the caller's: clip
//     length and resolution may differ, width / depth / heads / patch / tubelet may not;
//   * every parameter is filled by name with exact shape checks (f16 / bf16 / f64 -> f32), after
//     all checks passed (an error leaves the parameters untouched).
//
//   auto model = unmask::VideoMAEClassifier::random(cfg, 174, seed);
//   unmask::video::VideoMAELoadOptions opt;
//   opt.allow_missing_prefixes = {"head.", "fc_norm."};          // fine-tuning from a pretrain ckpt
//   auto report = unmask::video::load_videomae("vit_b_k400_pt.pth", cfg, model.params(), opt);
//   std::cout << report.summary();
//   unmask::video::save_videomae("out/", cfg, model.params(), VideoMAENaming::hf, 174);
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "unmask/train.h"
#include "unmask/videomae.h"
#include "models/videomae/names.h"

namespace unmask::video {

/// Writes dir/model.safetensors + dir/config.json (see the top of this file). `params` carry
/// original names (either model; values on a GPU are copied to the host first); num_classes > 0
/// marks a classifier (num_labels, id2label from class_names or LABEL_k). Only hf naming writes
/// the transformers keys (architectures, model_type); an original-naming config says it is not
/// a transformers directory and how to convert it. Atomic: a temporary
/// sibling directory is completed, then renamed; an existing `dir` is replaced only then, and only
/// if it holds nothing but files this function writes (an error otherwise, so a mistyped path
/// never deletes unrelated files).
void save_videomae(const std::string& dir, const VideoMAEConfig& config, const std::vector<Param>& params,
                   VideoMAENaming naming = VideoMAENaming::original, int64_t num_classes = 0,
                   const std::vector<std::string>& class_names = {});

/// The tensor-level form of save_videomae: `tensors` carry original names (any float dtype is
/// written as given). Used by `unmask convert-videomae`. Notes about dropped tables are
/// appended to *notes when given.
void save_videomae_tensors(const std::string& dir, const VideoMAEConfig& config, const NamedTensors& tensors,
                           VideoMAENaming naming, int64_t num_classes, std::vector<std::string>* notes = nullptr,
                           const std::vector<std::string>& class_names = {});

/// A checkpoint's config.json read back. HF fields missing from the file take HF's defaults.
struct VideoMAECheckpointConfig {
  VideoMAEConfig config;
  int64_t num_classes = 0;  // num_labels / id2label of a classifier, else 0
  bool from_unmask_block = false;
  std::vector<std::string> notes;  // divergences corrected (eps 1e-12, HF small's 16 heads)
};

/// Reads `path` (a directory holding config.json, or the config.json itself). HF configs are
/// corrected for two known divergences (reported in notes): layer_norm_eps 1e-12 -> 1e-6 (the
/// weights were trained with 1e-6) and HF's "small" with 16 heads -> 6 (head dim 64).
VideoMAECheckpointConfig read_videomae_checkpoint_config(const std::string& path);
/// The VideoMAEConfig of read_videomae_checkpoint_config, for CLIs that build the model.
VideoMAEConfig read_videomae_config(const std::string& path);

/// A checkpoint read into memory with original names, before it meets a model.
struct VideoMAECheckpoint {
  std::string source;                                // what was read ("dir/model.safetensors", "x.pth (key 'model')")
  std::string format;                                // "safetensors" | "pytorch"
  VideoMAENaming naming = VideoMAENaming::original;  // of the file
  NamedTensors tensors;                              // original names (pretrain or fine-tune layout), stored dtypes
  int64_t stored_tensors = 0;                        // tensors in the file's state dict (HF: q, k, v separate)
  std::optional<VideoMAECheckpointConfig> config;    // config.json next to the weights, if any
  std::vector<std::string> notes;                    // unwrapping, prefixes stripped, HF tensors dropped
};

/// Reads a checkpoint (any supported container) and converts it to original names. Throws for
/// unknown formats, unreadable files, names that are neither VideoMAE convention, and missing
/// q_bias / v_bias / query / key / value tensors.
VideoMAECheckpoint read_videomae_checkpoint(const std::string& path);

struct VideoMAELoadOptions {
  /// Parameters under these name prefixes may be absent from the checkpoint and keep their
  /// initial values (reported): e.g. {"head.", "fc_norm."} when fine-tuning from a pretraining
  /// checkpoint. Never applies to a q_bias / v_bias whose block's qkv weight was loaded.
  std::vector<std::string> allow_missing_prefixes;
  /// Unused checkpoint tensors (names the model does not have) are an error instead of a report.
  /// The expected drops of a pretrain -> fine-tune transfer are not "unused".
  bool strict = false;
};

struct LoadReport {
  std::string source, format;
  VideoMAENaming naming = VideoMAENaming::original;
  bool pretrain_checkpoint = false;      // the file had the encoder under `encoder.`
  int64_t loaded = 0;                    // parameters filled from the checkpoint
  std::vector<std::string> kept_init;    // missing parameters allowed to keep their init
  std::vector<std::string> dropped;      // expected drops (decoder into a classifier, ...), with reasons
  std::vector<std::string> unused;       // checkpoint tensors the model has no place for
  std::vector<std::string> regenerated;  // positional tables regenerated / interpolated, with grids
  std::vector<std::string> notes;        // unwrapping, prefix stripping, dtype conversion, config
  std::optional<VideoMAECheckpointConfig> checkpoint_config;
  /// Several lines: source, counts, then each list.
  std::string summary() const;
};

/// Loads `path` into `params` (original names, either model) of a model built with `config`.
/// See the top of this file for what is handled; every problem found is listed in one Error
/// (missing parameters, shape mismatches naming both shapes, a config that differs in width /
/// depth / heads naming both values, q_bias / v_bias absent).
LoadReport load_videomae(const std::string& path, const VideoMAEConfig& config, std::vector<Param>& params,
                         const VideoMAELoadOptions& options = {});

/// The original name -> shape every tensor of a model of `config` has: the pretraining layout
/// (encoder.*, decoder) when num_classes == 0 and pretrain, else the fine-tune layout with a head
/// of num_classes. Used to validate conversions without building a model.
std::vector<std::pair<std::string, Shape>> videomae_expected_shapes(const VideoMAEConfig& config, bool pretrain,
                                                                    int64_t num_classes);

}  // namespace unmask::video
