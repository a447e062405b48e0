// models/videomae/names.h: checkpoint names of VideoMAE v1/v2/V-SWIFT (the originals) and of
// Hugging Face transformers' VideoMAE, and the conversion both ways.
//
// Original (timm-style) names, video.md §1.8; pretrain checkpoints put the encoder under
// `encoder.`, fine-tuned ones have no prefix:
//   [encoder.]patch_embed.proj.{weight [D,3,2,16,16], bias}
//   [encoder.]blocks.i.{norm1, attn.qkv.weight [3D,D], attn.q_bias [D], attn.v_bias [D], attn.proj,
//                       norm2, mlp.fc1, mlp.fc2}
//   encoder.norm | norm, encoder_to_decoder.weight, mask_token, decoder.blocks.i.*, decoder.norm,
//   decoder.head, fc_norm, head
// HF names (transformers models/videomae, video.md §1.9):
//   videomae.embeddings.patch_embeddings.projection.*
//   videomae.encoder.layer.i.{layernorm_before, attention.attention.{query,key,value}.weight [D,D],
//                             attention.attention.{q_bias,v_bias}, attention.output.dense,
//                             layernorm_after, intermediate.dense, output.dense}
//   videomae.layernorm, encoder_to_decoder.weight, mask_token, decoder.decoder_layers.i.*,
//   decoder.norm, decoder.head, fc_norm, classifier
//
// The fused qkv [3A, D] (A = heads x head_dim) splits by rows into query = rows [0, A),
// key = [A, 2A), value = [2A, 3A); fusing concatenates them back, so orig -> HF -> orig gives the
// same names, order and bytes. There is no key bias anywhere: q_bias and v_bias are carried as
// they are and their absence is an error, never a silent zero. An HF file that stores
// `query.bias` / `value.bias` (Linear-style) is accepted as q_bias / v_bias; a `key.bias` is
// accepted only if it is all zeros (then reported as dropped), since the original has none.
//
// Fixed positional tables (V-SWIFT registers `pos_embed` / `encoder.pos_embed` as buffers; v1,
// v2 and HF do not store them): HF has no slot, so orig -> HF checks the table IS the fixed 1-D
// sinusoid (a learned table cannot be represented and is an error) and reports it in `dropped`.
//
//   std::vector<std::string> dropped;
//   NamedTensors hf = videomae_original_to_hf(original, &dropped);
//   NamedTensors back = videomae_hf_to_original(hf);   // == original (less the dropped tables)
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unmask/tensor.h"

namespace unmask::video {

/// (name, tensor) pairs, e.g. the contents of a safetensors file, in file order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Which naming a state dict uses.
enum class VideoMAENaming : uint8_t { original, hf };

/// original if any name starts with "videomae." is absent and an original name is present;
/// throws when the names mix both conventions or match neither.
VideoMAENaming detect_videomae_naming(const NamedTensors& tensors);

/// Original -> HF. Throws listing every unknown name, every block whose qkv lacks q_bias or
/// v_bias (or has biases without qkv), bad qkv shapes and duplicate results. Tables dropped on
/// purpose (fixed sinusoid pos_embed buffers) are appended to *dropped when given.
NamedTensors videomae_original_to_hf(const NamedTensors& original, std::vector<std::string>* dropped = nullptr);

/// Layout of the original names to produce.
enum class OriginalLayout : uint8_t {
  automatic,  // pretrain if the HF dict has a decoder, encoder_to_decoder or mask_token
  pretrain,   // encoder under `encoder.`
  finetune,   // encoder at the top level
};

/// HF -> original (names of VideoMAEForPreTraining, VideoMAEForVideoClassification, or of a bare
/// VideoMAEModel without the `videomae.` prefix). Throws listing unknown names, blocks missing one of query/key/value,
/// q_bias or v_bias, mismatched q/k/v shapes and a non-zero key bias. Zero key biases it drops are appended to *dropped
/// when given.
NamedTensors videomae_hf_to_original(const NamedTensors& hf, OriginalLayout layout = OriginalLayout::automatic,
                                     std::vector<std::string>* dropped = nullptr);

/// The fixed 1-D sinusoid table of VideoMAE (base 10000; dim j uses pos / 10000^(2 floor(j/2) / d),
/// sin on even j, cos on odd j), computed in double: f32 [1, tokens, dim].
Tensor sinusoid_position_table(int64_t tokens, int64_t dim);

/// Checks a checkpoint's positional table `name` against the model's grid and width: the table
/// must be [1, tokens, dim] (or [tokens, dim]). On a mismatch the error names both shapes and
/// both token grids it could come from; the hint says that a fixed sinusoid table is simply
/// regenerated for the new clip length / resolution (sinusoid_position_table) and a learned one
/// resampled (train::resample_table, nn/resample_table.h).
void check_position_table(const std::string& name, const Tensor& table, int64_t frames, int64_t height, int64_t width,
                          int64_t dim);

}  // namespace unmask::video
