// ref/conv_ref.cc: see conv_ref.h.
#include "ref/conv_ref.h"

namespace unmask::ref {

void conv2d(const double* x, const double* w, const double* bias, double* y, int64_t B, int64_t Cin, int64_t H,
            int64_t W, int64_t Cout, int64_t k, int64_t stride, int64_t pad) {
  const int64_t OH = (H + 2 * pad - k) / stride + 1, OW = (W + 2 * pad - k) / stride + 1;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < Cout; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bias ? bias[o] : 0.0;
          for (int64_t c = 0; c < Cin; ++c)
            for (int64_t u = 0; u < k; ++u)
              for (int64_t v = 0; v < k; ++v) {
                const int64_t h = i * stride - pad + u, ww = j * stride - pad + v;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += w[((o * Cin + c) * k + u) * k + v] * x[((b * Cin + c) * H + h) * W + ww];
              }
          y[((b * Cout + o) * OH + i) * OW + j] = acc;
        }
}

}  // namespace unmask::ref
