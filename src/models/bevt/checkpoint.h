// models/bevt/checkpoint.h: BEVT weights in BEVT's own (mmaction) names, and the DALL-E tokenizer
// as a separate file.
//
// A saved model directory holds model.safetensors (every trainable tensor under its BEVT name:
// backbone.layers.i.blocks.j.attn.qkv.weight, backbone.fpn_s.0.weight, cls_head.lm_head.weight,
// ...) and config.json (the Swin sizes and the vocabulary, so a reader can rebuild the model).
//
// Loading (load_bevt) reads a directory (model.safetensors), a .safetensors file, or a torch.save
// file: an mmcv checkpoint {meta, state_dict, optimizer} as BEVT writes it, or a bare state dict.
// A DDP `module.` prefix is stripped; the buffers BEVT also stores (relative_position_index,
// attn_mask) and the frozen tokenizer it registers as cls_head.vae_encoder.* are skipped and
// reported. Other layouts users have: torchvision's swin3d_* (features.{0..6}, mlp.0 / mlp.3,
// head -> cls_head.fc_cls), official Video Swin (BEVT's names with cls_head.fc_cls), and a 2-D
// Swin image-stream checkpoint (BEVT's pretrained2d init): its patch embedding goes to
// patch_embed_2d and, inflated (repeated over the tubelet, divided by it), to patch_embed; each
// 2-D table is tiled over the temporal offsets. Every parameter is filled by name with exact
// shape checks after all checks passed.
//
// The tokenizer (load_dalle_encoder) is OpenAI's encoder.pkl itself (torch.save of the whole
// module: its pickle is walked for the tensors, nothing in it is run; io/torch_pickle.h), or
// DALL-E's encoder state dict (blocks.input.w, ...) in a safetensors or torch.save file, with or
// without BEVT's cls_head.vae_encoder. prefix (so a BEVT checkpoint that holds it serves as the
// tokenizer file too); its sizes come from the shapes.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/bevt/backbone.h"
#include "models/bevt/dvae.h"
#include "unmask/train.h"

namespace unmask::bevt {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The tensors of a checkpoint (any supported container), BEVT names, prefixes stripped; notes
/// say what was unwrapped or skipped.
NamedTensors read_bevt_tensors(const std::string& path, std::vector<std::string>* notes = nullptr);

struct BevtLoadReport {
  std::string source;
  int64_t loaded = 0, inflated = 0;  // inflated: 2-D tensors made 3-D (a 2-D Swin checkpoint)
  std::vector<std::string> kept_init;  // parameters the file lacks, allowed by the options
  std::vector<std::string> unused;     // file tensors the model has no place for
  std::vector<std::string> notes;
  std::string summary() const;
};

struct BevtLoadOptions {
  /// Parameters under these prefixes may be missing from the file (keep their init).
  std::vector<std::string> allow_missing_prefixes;
  /// The model's window (t, h, w). A 2-D table of another window size (a Swin trained at 384
  /// px: 23 x 23 rows) is resized bicubically to (2h-1) x (2w-1) before it is tiled over the
  /// 2t-1 temporal offsets, as BEVT's inflate_weights does; {0, 0, 0}: such a file is an error.
  std::array<int64_t, 3> window{0, 0, 0};
};

/// Fills `params` (BEVT names) from `path`. One Error lists every missing parameter and shape
/// mismatch; nothing is changed then.
BevtLoadReport load_bevt(const std::string& path, std::vector<Param>& params, const BevtLoadOptions& options = {});

/// Writes dir/model.safetensors and dir/config.json (into an existing directory; each file atomic).
void save_bevt(const std::string& dir, const SwinConfig& config, int64_t vocab, const std::vector<Param>& params);

/// A fine-tuned classifier: dir/model.safetensors (BEVT names + cls_head.fc_cls) and
/// dir/config.json (the Swin sizes, num_classes, id2label from class_names when given).
void save_swin_classifier(const std::string& dir, const SwinConfig& config, int64_t num_classes,
                          const std::vector<Param>& params, const std::vector<std::string>& class_names = {});

/// The Swin sizes and vocabulary of a saved model directory's config.json (or the file itself).
std::pair<SwinConfig, int64_t> read_bevt_config(const std::string& path);

/// The DALL-E encoder in `path` (see the top of this file).
DalleEncoder load_dalle_encoder(const std::string& path);
/// Writes the encoder as a safetensors file under DALL-E's names.
void save_dalle_encoder(const std::string& path, DalleEncoder& encoder);

}  // namespace unmask::bevt
