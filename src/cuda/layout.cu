// cuda/layout.cu: the layout ops of ops.h on CUDA (front-end and CPU twin: ops/layout_ops.cc).
//   transpose        32 x 32 tiles through shared memory (a padded column: no bank conflicts),
//                    blockIdx.z the batch; coalesced reads and writes
//   max_pool2x2      one thread per output element, grid-stride
//   argmax_channels  one thread per (b, p) cell, looping over the channels in order (the reads of a
//                    warp are 32 consecutive cells of one channel: coalesced); the same first
//                    maximum / first NaN rule as the CPU loop
//   scale_rows       one thread per element, grid-stride
// All exact, so the results are the CPU's bits.
#include <cstdint>

#include "cuda/check.h"
#include "cuda/common.cuh"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "unmask/error.h"

namespace unmask::cuda {
namespace {

constexpr int kTile = 32, kTileRows = 8;  // a 32 x 8 block moves a 32 x 32 tile
constexpr int kThreads = 256;

// The CPU's maximum rule (ops/layout_ops.cc): v replaces m when larger or NaN; a NaN m stays.
__device__ __forceinline__ bool replaces_max(float v, float m) { return !isnan(m) && (isnan(v) || v > m); }

__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t R, int64_t C) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t b = blockIdx.z;
  const float* xb = x + b * R * C;
  float* yb = y + b * R * C;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < R && c < C) tile[i][threadIdx.x] = xb[r * C + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kTileRows) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // y[c, r] = x[r, c]
    if (r < R && c < C) yb[c * R + r] = tile[threadIdx.x][i];
  }
}

__global__ void max_pool2x2_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes, int64_t H,
                                   int64_t W) {
  const int64_t OH = H / 2, OW = W / 2, n = planes * OH * OW;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = o % OW, i = o / OW % OH, plane = o / (OH * OW);
    const float* top = x + (plane * H + 2 * i) * W + 2 * j;
    const float v[4] = {top[0], top[1], top[W], top[W + 1]};
    float m = v[0];
    for (int k = 1; k < 4; ++k)
      if (replaces_max(v[k], m)) m = v[k];
    y[o] = m;
  }
}

__global__ void argmax_channels_kernel(const float* __restrict__ x, int32_t* __restrict__ ids, int64_t B, int64_t C,
                                       int64_t P) {
  for (int64_t cell = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; cell < B * P;
       cell += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = cell / P, p = cell % P;
    const float* xc = x + b * C * P + p;
    float best = xc[0];
    int32_t arg = 0;
    for (int64_t c = 1; c < C && !isnan(best); ++c) {
      const float v = xc[c * P];
      if (replaces_max(v, best)) best = v, arg = int32_t(c);
    }
    ids[cell] = arg;
  }
}

__global__ void scale_rows_kernel(const float* x, int64_t ldx, const float* __restrict__ scales, int64_t group,
                                  float* y, int64_t ldy, int64_t R, int64_t C) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < R * C; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / C, c = e % C;
    y[r * ldy + c] = scales[r / group] * x[r * ldx + c];
  }
}

unsigned grid_for(int64_t n) { return unsigned(std::min<int64_t>(ceil_div(n, int64_t(kThreads)), 65536)); }

}  // namespace

void transpose(Context& ctx, const float* x, float* y, int64_t B, int64_t R, int64_t C) {
  UNMASK_CHECK(B <= 65535 && ceil_div(R, int64_t(kTile)) <= 65535, "transpose (cuda): ", B, " x ", R,
               " rows exceed the grid (at most 65535 batches and 2 million rows)");
  const dim3 grid(unsigned(ceil_div(C, int64_t(kTile))), unsigned(ceil_div(R, int64_t(kTile))), unsigned(B));
  transpose_kernel<<<grid, dim3(kTile, kTileRows), 0, cuda_state(ctx).stream>>>(x, y, R, C);
  CUDA_CHECK_LAUNCH();
}

void max_pool2x2(Context& ctx, const float* x, float* y, int64_t planes, int64_t H, int64_t W) {
  max_pool2x2_kernel<<<grid_for(planes * (H / 2) * (W / 2)), kThreads, 0, cuda_state(ctx).stream>>>(x, y, planes, H,
                                                                                                     W);
  CUDA_CHECK_LAUNCH();
}

void argmax_channels(Context& ctx, const float* x, int32_t* ids, int64_t B, int64_t C, int64_t P) {
  argmax_channels_kernel<<<grid_for(B * P), kThreads, 0, cuda_state(ctx).stream>>>(x, ids, B, C, P);
  CUDA_CHECK_LAUNCH();
}

void scale_rows(Context& ctx, const float* x, int64_t ldx, const float* scales, int64_t rows_per_group, float* y,
                int64_t ldy, int64_t R, int64_t C) {
  scale_rows_kernel<<<grid_for(R * C), kThreads, 0, cuda_state(ctx).stream>>>(x, ldx, scales, rows_per_group, y, ldy,
                                                                              R, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace unmask::cuda
