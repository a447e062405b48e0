// cpu/blas.h: the CPU GEMM (BLAS call + fused epilogue) and the BLAS thread settings.
//
// Two BLAS libraries can sit behind gemm(): OpenBLAS (Debian's pthread build, always linked)
// and oneDNN (dnnl_sgemm; compiled in when CMake finds libdnnl, UNMASK_WITH_DNNL). The default
// is the faster one on BERT shapes as measured in bench/GEMM_CHOICE.md; UNMASK_BLAS=openblas|onednn
// overrides it.
//
// Threading (bench/GEMM_CHOICE.md has the measurement): the output is cut into tiles that
// Context::parallel_for hands to the pool threads; each tile is one single-threaded BLAS call
// followed by the bias/activation epilogue while the tile is still in L2. The BLAS libraries'
// own thread pools are therefore kept at one thread, so the library never competes with the
// Context pool for the cores (no oversubscription).
#pragma once
#include <cstdint>
#include <string_view>

#include "ops/op_params.h"
#include "unmask/context.h"
#include "unmask/tensor.h"

namespace unmask::cpu {

enum class GemmBackend : uint8_t { openblas, onednn };
const char* gemm_backend_name(GemmBackend b);

/// How a GEMM uses the cores (kept selectable for bench/gemm_cpu.cc).
enum class GemmThreading : uint8_t {
  tiles,         // pool threads, one single-threaded BLAS call + epilogue per tile (default)
  blas_threads,  // one BLAS call on ctx.num_threads() library threads, then a parallel epilogue
};

/// The backend in use: the test override if set, else UNMASK_BLAS, else the measured default.
GemmBackend gemm_backend();
/// Backends compiled into this build (openblas always; onednn with UNMASK_WITH_DNNL).
bool gemm_backend_available(GemmBackend b);
/// Test/bench hook: force a backend (nullptr-like reset with `reset = true`).
void gemm_backend_override_for_testing(GemmBackend b, bool reset = false);
/// Bench hook: threading strategy and row-block size (0 = default) for later gemm() calls.
void gemm_tuning_override_for_bench(GemmThreading threading, int64_t row_block);

/// c [M, N] (ldc) = alpha op(a) op(b), row-major, on the calling thread only (inside a pool
/// task: the attention kernels run one (sequence or window, head) item per task), with the GEMM
/// backend in use. At T = 128, HS = 64 oneDNN's dnnl_sgemm takes 14-18 us per product against
/// OpenBLAS's 24-27 us (1 thread, CPU time; bench/train_ops_bench.cc notes).
void sgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc);

/// Runs one validated GEMM (see ops::GemmParams) on ctx's threads.
void gemm(Context& ctx, const ops::GemmParams& p);

/// Packs w (f32 [N, K], contiguous, validated) for gemm_packed (src/cpu/gemm_packed_cpu.cc):
/// oneDNN's blocked layout per column slice when the oneDNN backend is in use, else a reference
/// to w itself (gemm_packed then runs cpu::gemm).
ops::PackedWeight pack_weight(Context& ctx, const Tensor& w, DType compute = DType::f32);
/// The bf16 matrix unit oneDNN runs on: "amx", "avx512_bf16" or "" (see ops::cpu_bf16_unit).
const char* bf16_unit();
/// One tile of a bf16 GEMM on the calling thread: c [M, N] (ldc) = alpha * op(a) @ op(b) +
/// beta * c with op(a), op(b) rounded to bf16 (RNE) and fp32 accumulation (oneDNN matmul).
/// K >= 1 (cpu::gemm sends K = 0, c = beta c, to its sgemm).
void gemm_tile_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
/// Runs c = act(alpha * a @ W^T + bias + beta * c) with p.b unused (the weights come from w;
/// p.ta must be no). p.N == w.n_out(), p.K == w.k().
void gemm_packed(Context& ctx, const ops::GemmParams& p, const ops::PackedWeight& w);
/// Bench hook: rows per primitive call (0 = all of M, < 0 = default) and the widest column
/// slice for later pack_weight calls (<= 0 = default), whether those ask for huge pages, and
/// whether bias and activation run as oneDNN post-ops instead of our epilogue, and whether
/// tasks go row-major (see gemm_packed_cpu.cc).
void packed_gemm_tuning_override_for_bench(int64_t row_block, int64_t max_slice, bool huge_pages = true,
                                           bool fuse_post_ops = false, bool row_major = true);
/// How many calls had to reorder packed weights because the primitive wanted another layout.
int64_t packed_gemm_slow_reorders();

/// Sets the BLAS library's own thread count (called by Context). With the tiles strategy the
/// libraries are kept single-threaded whatever n is (see above); n is remembered for
/// blas_threads.
void blas_set_num_threads(int n);

}  // namespace unmask::cpu
