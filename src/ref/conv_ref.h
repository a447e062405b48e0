// ref/conv_ref.h: the float64 oracle of ops::conv2d (PyTorch's F.conv2d: cross-correlation,
// zero padding), direct loops.
#pragma once
#include <cstdint>

namespace unmask::ref {

/// y [B, Cout, OH, OW] = conv(x [B, Cin, H, W], w [Cout, Cin, k, k]) + bias [Cout] (null: none),
/// OH = (H + 2 pad - k) / stride + 1 (OW alike).
void conv2d(const double* x, const double* w, const double* bias, double* y, int64_t B, int64_t Cin, int64_t H,
            int64_t W, int64_t Cout, int64_t k, int64_t stride, int64_t pad);

}  // namespace unmask::ref
