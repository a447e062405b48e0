// cpu/gemm_cpu.cc: GEMM on the CPU = a BLAS call per output tile + the fused epilogue.
//
// c = act(alpha * op(a) @ op(b) + bias + beta * c). The BLAS computes alpha * op(a) @ op(b) +
// beta * c; the epilogue (bias, activation) is cpu::kernels().bias_act_rows, applied to each
// tile right after its BLAS call while the tile is still in L2.
//
// Tiling (GemmThreading::tiles, the default; see bench/GEMM_CHOICE.md for the measurements):
//   - rows are cut into blocks of ~kRowBlock (made a multiple of the thread count when there
//     are few, so no thread idles at the end);
//   - when there are fewer row blocks (over the batch) than threads, as for one BERT sequence
//     of 128 tokens on 2 threads, the columns are split instead: each thread then streams only
//     its share of the weight matrix, which at small M is what costs;
//   - Context::parallel_for gives each thread a contiguous run of tiles; each tile is one
//     single-threaded BLAS call, so the library thread pools are kept at one thread.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "unmask/error.h"

#if defined(UNMASK_WITH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

namespace unmask::cpu {
namespace {

// Rows per tile when M is large. Measured (bench/GEMM_CHOICE.md, bench/gemm_cpu.cc): 256 is
// as fast as or faster than 64 and 128 at M = 1024 and 4096 on both machines tried; a smaller
// tile re-packs the weight matrix more often than the hotter epilogue saves.
constexpr int64_t kRowBlock = 256;
// Column splits are rounded to this many columns (a cache line, a 16-float vector).
constexpr int64_t kColAlign = 16;

std::atomic<int> g_backend_override{-1};
std::atomic<int> g_threading{int(GemmThreading::tiles)};
std::atomic<int64_t> g_row_block{kRowBlock};
std::atomic<int> g_blas_threads{1};

GemmBackend default_backend() {
  const char* env = std::getenv("UNMASK_BLAS");
  if (env && *env) {
    std::string_view v(env);
    if (v == "openblas") return GemmBackend::openblas;
    if (v == "onednn") {
      if (!gemm_backend_available(GemmBackend::onednn))
        throw Unsupported("UNMASK_BLAS=onednn but this build has no oneDNN",
                          Hint("install libdnnl-dev and reconfigure, or set UNMASK_BLAS=openblas"));
      return GemmBackend::onednn;
    }
    throw Error("UNMASK_BLAS='", v, "' is not a GEMM backend; expected openblas or onednn");
  }
  // The measured default (bench/GEMM_CHOICE.md): oneDNN's AVX-512 kernels where available.
  return gemm_backend_available(GemmBackend::onednn) ? GemmBackend::onednn : GemmBackend::openblas;
}

// One single-matrix sgemm on the calling thread (or on `threads` library threads).
//   c [M, N] (ldc) = alpha * op(a) [M, K] @ op(b) [K, N] + beta * c
void sgemm(GemmBackend backend, int threads, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
           float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc) {
  if (K == 0) {  // no product: c = beta * c (BLAS libraries differ on K = 0)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) c[m * ldc + n] = beta == 0.0f ? 0.0f : beta * c[m * ldc + n];
    return;
  }
  if (backend == GemmBackend::onednn) {
#if defined(UNMASK_WITH_DNNL)
    omp_set_num_threads(threads);  // per calling thread (OpenMP ICVs are per thread)
    dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb,
                                  beta, c, ldc);
    if (st != dnnl_success)
      throw Error("gemm: dnnl_sgemm failed with status ", int(st), " for M=", M, " N=", N, " K=", K);
    return;
#endif
  }
  if (threads != 1) openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              int(M), int(N), int(K), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  if (threads != 1) openblas_set_num_threads(1);
}

}  // namespace

const char* gemm_backend_name(GemmBackend b) {
  return b == GemmBackend::onednn ? "onednn" : "openblas";
}

bool gemm_backend_available(GemmBackend b) {
#if defined(UNMASK_WITH_DNNL)
  return true;
#else
  return b == GemmBackend::openblas;
#endif
}

GemmBackend gemm_backend() {
  int o = g_backend_override.load(std::memory_order_relaxed);
  if (o >= 0) return GemmBackend(o);
  static const GemmBackend chosen = default_backend();
  return chosen;
}

void gemm_backend_override_for_testing(GemmBackend b, bool reset) {
  if (!reset && !gemm_backend_available(b))
    throw Unsupported("gemm backend ", gemm_backend_name(b), " is not compiled into this build");
  g_backend_override.store(reset ? -1 : int(b));
}

void gemm_tuning_override_for_bench(GemmThreading threading, int64_t row_block) {
  g_threading.store(int(threading));
  g_row_block.store(row_block > 0 ? row_block : kRowBlock);
}

void blas_set_num_threads(int n) {
  g_blas_threads.store(n < 1 ? 1 : n);
  openblas_set_num_threads(1);  // see blas.h: the Context pool owns the cores
}

void sgemm_serial(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float* c, int64_t ldc) {
#if defined(UNMASK_WITH_DNNL)
  if (gemm_backend() == GemmBackend::onednn) {
    omp_set_num_threads(1);  // this thread's OpenMP setting: the product runs right here
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb, 0.0f, c, ldc);
    if (st != dnnl_success)
      throw Error("sgemm_serial: dnnl_sgemm failed with status ", int(st), " for M=", M, " N=", N, " K=", K);
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K),
              alpha, a, int(lda), b, int(ldb), 0.0f, c, int(ldc));
}

void gemm(Context& ctx, const ops::GemmParams& p) {
  if (p.batch == 0 || p.M == 0 || p.N == 0) return;
  const GemmBackend backend = gemm_backend();
  const CpuKernels& k = kernels();
  const bool ta = p.ta == ops::Trans::yes, tb = p.tb == ops::Trans::yes;
  const bool has_epilogue = p.bias || p.act != ops::Activation::none;
  const int threads = ctx.num_threads();
  const bool bf16 = ctx.cpu_gemm_dtype() == DType::bf16;  // bf16 tiles (set_training_precision checked the unit)

  if (!bf16 && GemmThreading(g_threading.load()) == GemmThreading::blas_threads) {
    // One library call per matrix on the library's threads, then a parallel epilogue.
    for (int64_t i = 0; i < p.batch; ++i) {
      float* c = p.c + i * p.batch_stride_c;
      sgemm(backend, threads, ta, tb, p.M, p.N, p.K, p.alpha, p.a + i * p.batch_stride_a, p.lda,
            p.b + i * p.batch_stride_b, p.ldb, p.beta, c, p.ldc);
      if (has_epilogue)
        ctx.parallel_for(p.M, [&](int64_t m0, int64_t m1) {
          k.bias_act_rows(c + m0 * p.ldc, p.ldc, p.bias, c + m0 * p.ldc, p.ldc, m1 - m0, p.N, p.act);
        }, 16);
    }
    return;
  }

  // Tile plan: row_tiles x col_tiles per matrix (see the file comment).
  int64_t row_block = std::min(p.M, g_row_block.load());
  int64_t row_tiles = (p.M + row_block - 1) / row_block;
  int64_t col_block = p.N, col_tiles = 1;
  if (p.batch * row_tiles < threads) {
    col_tiles = (threads + p.batch * row_tiles - 1) / (p.batch * row_tiles);
    col_block = ((p.N + col_tiles - 1) / col_tiles + kColAlign - 1) / kColAlign * kColAlign;
    col_tiles = (p.N + col_block - 1) / col_block;
  } else if (p.batch == 1 && row_tiles < 4 * threads && row_tiles % threads != 0) {
    // Few row tiles that do not divide evenly: even them out (e.g. 3 -> 4 tiles on 2 threads).
    row_tiles = (row_tiles + threads - 1) / threads * threads;
    row_block = (p.M + row_tiles - 1) / row_tiles;
    row_tiles = (p.M + row_block - 1) / row_block;
  }
  const int64_t tiles_per_matrix = row_tiles * col_tiles;

  ctx.parallel_for(p.batch * tiles_per_matrix, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = t / tiles_per_matrix, rem = t % tiles_per_matrix;
      const int64_t m0 = rem / col_tiles * row_block, n0 = rem % col_tiles * col_block;
      const int64_t mlen = std::min(row_block, p.M - m0), nlen = std::min(col_block, p.N - n0);
      const float* a = p.a + i * p.batch_stride_a + (ta ? m0 : m0 * p.lda);  // op(a) rows m0..
      const float* b = p.b + i * p.batch_stride_b + (tb ? n0 * p.ldb : n0);  // op(b) cols n0..
      float* c = p.c + i * p.batch_stride_c + m0 * p.ldc + n0;               // [mlen, nlen]
      if (bf16 && p.K > 0)
        gemm_tile_bf16(ta, tb, mlen, nlen, p.K, p.alpha, a, p.lda, b, p.ldb, p.beta, c, p.ldc);
      else
        sgemm(backend, 1, ta, tb, mlen, nlen, p.K, p.alpha, a, p.lda, b, p.ldb, p.beta, c, p.ldc);
      if (has_epilogue)
        k.bias_act_rows(c, p.ldc, p.bias ? p.bias + n0 : nullptr, c, p.ldc, mlen, nlen, p.act);
    }
  });
}

}  // namespace unmask::cpu
