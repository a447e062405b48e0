// ops/op_table.cc: which op each backend implements, and for which element types: the one table
// ops::supports reads for every device (a backend keeps no list of its own).
//
// A column is a set of DTypes. CPU: the kernels are f32; "emulated" ops also take bf16 / f16
// (f32 arithmetic, one rounding of each output: correct, not fast; the bf16 training path uses
// them). CUDA: what src/cuda implements, false in a build without the CUDA backend.
#include <array>
#include <cstdint>

#include "ops/ops.h"

namespace unmask::ops {

namespace {

constexpr uint16_t bit(DType t) { return uint16_t(1u << unsigned(t)); }
constexpr uint16_t kF32 = bit(DType::f32);
constexpr uint16_t kFloat = bit(DType::f32) | bit(DType::bf16) | bit(DType::f16);
constexpr uint16_t kF32Bf16 = bit(DType::f32) | bit(DType::bf16);

struct OpEntry {
  std::string_view name;
  uint16_t cpu, cuda;
};

// Every op front-end of ops.h that a backend runs (copies and index builders included).
constexpr std::array kOps = {
    // inference
    OpEntry{"gemm", kFloat, kFloat},            // CPU bf16 / f16: emulated
    OpEntry{"gemm_packed", kF32, kFloat},
    OpEntry{"layernorm", kFloat, kFloat},       // CPU: emulated
    OpEntry{"activation", kFloat, kFloat},      // CPU: emulated
    OpEntry{"softmax", kF32, kFloat},
    OpEntry{"embedding", kF32, kFloat},
    OpEntry{"embedding_layernorm", kF32, kFloat},
    OpEntry{"attention", kF32, kFloat},
    // training
    OpEntry{"layernorm_backward", kFloat, kFloat},   // CPU: emulated
    OpEntry{"activation_backward", kFloat, kFloat},  // CPU: emulated
    OpEntry{"bias_grad", kFloat, kFloat},            // CPU: emulated
    OpEntry{"linear_param_grads", kFloat, kFloat},   // CPU: emulated
    OpEntry{"dropout", kFloat, kFloat},              // CPU: emulated
    OpEntry{"dropout_backward", kFloat, kFloat},     // CPU: emulated
    OpEntry{"softmax_backward", kF32, kF32},
    OpEntry{"embedding_backward", kF32, kF32},
    OpEntry{"cross_entropy", kF32, kF32},
    OpEntry{"attention_forward_train", kF32Bf16, kF32Bf16},  // CUDA bf16: tensor cores, head sizes 64/80/88/128
    OpEntry{"attention_backward", kF32Bf16, kF32Bf16},
    OpEntry{"conv2d", kF32, kF32},                   // CUDA: cuDNN
    OpEntry{"window_attention", kF32, kF32},
    OpEntry{"window_attention_backward", kF32, kF32},
    // optimizers (f32 master weights and moments)
    OpEntry{"adamw_update", kF32, kF32},
    OpEntry{"adamw_update_many", kF32, kF32},
    OpEntry{"lamb_moments", kF32, kF32},
    OpEntry{"lamb_moments_many", kF32, kF32},
    OpEntry{"lamb_apply", kF32, kF32},
    OpEntry{"lamb_apply_many", kF32, kF32},
    OpEntry{"lamb_update_many", kF32, kF32},
    OpEntry{"axpy", kF32, kF32},
    OpEntry{"scale_inplace", kF32, kF32},
    OpEntry{"sum_squares", kF32, kF32},
    OpEntry{"sum_squares_many", kF32, kF32},
    // copies and zeroing (any element type)
    OpEntry{"copy", 0xffff, 0xffff},
    OpEntry{"copy_many", 0xffff, 0xffff},
    OpEntry{"zero_many", 0xffff, 0xffff},
    // layout ops (layout_ops.cc; argmax_channels writes i32 ids from f32)
    OpEntry{"transpose", kF32, kF32},
    OpEntry{"max_pool2x2", kF32, kF32},
    OpEntry{"argmax_channels", kF32, kF32},
    OpEntry{"scale_rows", kF32, kF32},
    // video tokens (video_ops.cc)
    OpEntry{"tubelet_gather", kF32, kF32},
    OpEntry{"tubelet_target", kF32, kF32},
    OpEntry{"mse_rows", kF32, kF32},
    OpEntry{"videomae_index", bit(DType::i32), bit(DType::i32)},
};

}  // namespace

bool supports(std::string_view op, Device device, DType dtype) {
  for (const OpEntry& e : kOps)
    if (e.name == op) {
      switch (device) {
        case Device::cpu:
          return (e.cpu & bit(dtype)) != 0;
        case Device::cuda:
#ifdef UNMASK_WITH_CUDA
          return (e.cuda & bit(dtype)) != 0;
#else
          return false;  // this build has no CUDA backend
#endif
      }
    }
  return false;
}

std::vector<std::string_view> supported_ops() {
  std::vector<std::string_view> names;
  for (const OpEntry& e : kOps) names.push_back(e.name);
  return names;
}

}  // namespace unmask::ops
