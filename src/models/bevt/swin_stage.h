// models/bevt/swin_stage.h: one stage of BEVT's Video Swin backbone (SwinTransformerBEVT's
// BasicLayer): `depth` shifted-window blocks, then patch merging (stages 1-3), for the video
// stream or the image stream, as an explicit forward/backward pair.
//
// Tokens enter and leave in volume order [B, D, H, W] (nn/window_geometry.h). Block j:
//   video: window and shift clipped to the volume (Video Swin's get_window_size), shift =
//          window / 2 on odd blocks, the -100 masks only where a shift remains;
//   image (reference/bevt.md 2.5): 7 x 7 windows, shift 3 on odd blocks, never clipped, and the
//          shifted-window masks of shift 3 applied in EVERY block (BEVT's forward passes the mask
//          to all blocks); the bias is the d = 0 plane of the block's 3-D table (index[:49, :49]).
// Each block gathers the rows into its window order, runs nn::block_forward with its
// relative-position bias (table[T, NH] gathered per call), and scatters back; the stage output
// before merging is what BEVT's necks read (x3, x4). The index maps and masks of a geometry are
// made once and kept on the device (StageGeometryCache).
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "nn/patch_merging.h"
#include "nn/vit_block.h"
#include "nn/window_geometry.h"

namespace unmask::bevt {

struct SwinStageShape;

/// What block j's attention and row gathers need of its geometry, on the activations' device:
/// host-made integers and masks that would otherwise be rebuilt and uploaded every block of
/// every pass (a video block's 392 x 392 index and 8 windows of masks: 5.5 MB).
struct BlockTables {
  train::WindowGeometry g;
  Tensor index_ids;                     // i32 [N N]: the bias table's row of each (i, j)
  Tensor mask;                          // f32 [windows, N, N], or undefined (no mask)
  Tensor rows, back;                    // i32: the volume row of each window row, and the inverse
};

/// BlockTables per (batch, volume, window, stream, block parity, device), made at first use.
class StageGeometryCache {
 public:
  const BlockTables& get(const SwinStageShape& s, int64_t block, Device device);

 private:
  std::map<std::vector<int64_t>, BlockTables> tables_;
};

struct SwinStageParams {
  std::vector<nn::BlockParams> blocks;
  std::vector<train::PV> tables;        // per block: relative_position_bias_table [T, NH]
  bool merge = false;                   // patch merging after the blocks (stages 1-3)
  train::PatchMergingParams merging;
  std::shared_ptr<StageGeometryCache> geometry = std::make_shared<StageGeometryCache>();  // not a parameter
};

struct SwinStageShape {
  int64_t batch = 0;
  std::array<int64_t, 3> size{};        // D, H, W of the stage's token volume
  std::array<int64_t, 3> window{8, 7, 7};  // the configured window (also the tables' window)
  int64_t dim = 0, heads = 0, mlp_hidden = 0;
  float eps = 1e-5f;
  bool image = false;                   // the image stream's rules (see the file comment)
  // Drop path: per block, per-sample scales of the two branches (each [batch]); empty = none.
  std::vector<std::vector<float>> drop_attn, drop_mlp;
};

struct SwinStageSaved {
  std::vector<Tensor> inputs;           // each block's input, in its window order
  std::vector<nn::BlockSaved> blocks;
  Tensor out;                           // the blocks' output, volume order [B D H W, C]
  Tensor merged;                        // after patch merging [B D (H/2) (W/2), 2C] (merge only)
  train::PatchMergingSaved merging;
};

/// The geometry of block j of a stage: its (clipped) window and roll.
train::WindowGeometry stage_block_geometry(const SwinStageShape& s, int64_t block);

/// x: f32 [B D H W, C] in volume order -> saved.out (and saved.merged).
void swin_stage_forward(Context& ctx, const SwinStageParams& p, const Tensor& x, const SwinStageShape& s,
                        SwinStageSaved& saved);
/// g_merged: the gradient of saved.merged (undefined without merging); g_out: of saved.out
/// (undefined: none besides the merging's). Returns the gradient of x; parameter gradients
/// (tables included) accumulate.
Tensor swin_stage_backward(Context& ctx, SwinStageParams& p, const SwinStageSaved& saved, const SwinStageShape& s,
                           const Tensor& g_merged, const Tensor& g_out);

}  // namespace unmask::bevt
