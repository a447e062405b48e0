// ops/tubelet_geometry.h: where a video token's pixels are (ops.h, the video-token ops), one
// definition for the CPU ops (ops/video_ops.cc) and the CUDA kernels (cuda/video.cu).
//
// videos f32 [B, C, T, H, W] contiguous; token j of clip b has the flat id b Np + j with
// j = (t, h, w) row-major over (T / tt, H / p, W / p); K = C tt p p values per token.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define UNMASK_TUBELET_HD __host__ __device__
#else
#define UNMASK_TUBELET_HD
#endif

namespace unmask::ops {

struct TubeletGeometry {
  int64_t B = 0, C = 0, T = 0, H = 0, W = 0, tt = 0, p = 0;
  int64_t gh = 0, gw = 0, Np = 0, K = 0;  // derived: H / p, W / p, tokens per clip, values per token

  /// The geometry of [B, C, T, H, W] clips cut into tt x p x p tubelets. The caller has checked
  /// that they tile (tt | T, p | H, p | W).
  static TubeletGeometry of(int64_t B, int64_t C, int64_t T, int64_t H, int64_t W, int64_t tt, int64_t p) {
    TubeletGeometry g;
    g.B = B, g.C = C, g.T = T, g.H = H, g.W = W, g.tt = tt, g.p = p;
    g.gh = H / p, g.gw = W / p;
    g.Np = (T / tt) * g.gh * g.gw;
    g.K = C * tt * p * p;
    return g;
  }

  /// Offset in the batch of pixel (c, dt, dy, dx) of flat token `id`.
  UNMASK_TUBELET_HD int64_t pixel(int64_t id, int64_t c, int64_t dt, int64_t dy, int64_t dx) const {
    const int64_t b = id / Np, j = id % Np;
    const int64_t t = j / (gh * gw), h = (j / gw) % gh, w = j % gw;
    return (((b * C + c) * T + t * tt + dt) * H + h * p + dy) * W + w * p + dx;
  }
};

}  // namespace unmask::ops
