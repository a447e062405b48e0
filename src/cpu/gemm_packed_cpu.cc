// cpu/gemm_packed_cpu.cc: GEMM against a weight matrix packed once (ops::pack_weight /
// ops::gemm_packed), for the Linear layers whose weights never change.
//
//   c [M, N] = act(alpha * a [M, K] @ W^T + bias + beta * c),  W [N, K] (HF layout)
//
// Why: dnnl_sgemm re-packs op(b) = W^T (K x N, up to 9.4 MB for BERT's FFN) into its blocked
// layout on every call; at M = 128 tokens that re-pack is a visible share of the call. Here the
// weights are reordered once into the layout oneDNN's matmul primitive asks for
// (memory::format_tag::any), and each call runs the primitive on the packed buffer.
//
// Threading (same rules as gemm_cpu.cc): N is cut into column slices at pack time, a multiple
// of the thread count and at most g_max_slice columns wide (kSliceAlign-aligned); each slice is
// packed into one buffer (2 MiB-aligned, transparent huge pages requested). A call cuts M into
// row blocks (256 rows) and hands the (slice, row block) tasks to Context::parallel_for:
// slice-major when there are fewer row blocks than threads (M = 128: each thread streams only
// its share of W), else row-major (each thread keeps its own rows of a and c, so the next
// row-parallel op finds them in its cache). Each task is one single-threaded primitive execution
// (the pool thread's OpenMP thread count is held at 1, so no OpenMP team ever starts and spins
// against the pool for the cores), then our fused bias/activation epilogue
// (cpu::kernels().bias_act_rows) on that tile while it is in L2. oneDNN post-ops for the
// epilogue were measured and gained nothing (bench/GEMM_CHOICE.md section 3); they remain a
// bench option. Primitives use a user (thread-local) scratchpad: this libdnnl shares one library
// scratchpad between primitives, which two pool threads would corrupt.
//
// Primitives depend on (M, K, slice width, lda, ldc), not on the weights, so one global cache
// serves every layer with the same shape; oneDNN's own primitive cache also shares the JIT code.
// A primitive whose weight layout differs from the packed one (only possible at odd M) gets
// the packed weights reordered into a thread-local buffer for that call (correct, slower; counted
// by packed_gemm_slow_reorders() for the bench).
//
// Without oneDNN (OpenBLAS builds, or UNMASK_BLAS=openblas at pack time) the "packed" weight is
// a reference to the source tensor and a call is an ordinary cpu::gemm.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/half.h"
#include "cpu/blas.h"
#include "cpu/kernels.h"
#include "unmask/error.h"

#if defined(UNMASK_WITH_DNNL)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace unmask::cpu {
namespace {

// Column slices are multiples of this many columns (oneDNN's brgemm N block is 64 floats).
constexpr int64_t kSliceAlign = 64;
// Widest column slice (a multiple of kSliceAlign); bench/GEMM_CHOICE.md "Pre-packed weights".
constexpr int64_t kMaxSlice = 1024;
// Rows per primitive call (0 = all of M per call; measured in bench/GEMM_CHOICE.md section 3).
constexpr int64_t kRowBlock = 256;
// The M used to ask oneDNN for its weight layout at pack time.
constexpr int64_t kPackM = 256;

std::atomic<int64_t> g_row_block{kRowBlock};
std::atomic<int64_t> g_max_slice{kMaxSlice};
std::atomic<int64_t> g_slow_reorders{0};
std::atomic<bool> g_huge_pages{true};
std::atomic<bool> g_fuse_post_ops{false};
std::atomic<bool> g_row_major{true};

// The reference-only form: the source tensor itself, run through cpu::gemm.
struct BlasWeight final : ops::PackedWeight::Impl {
  Tensor w;  // [N, K]
};

// Column slice widths for N columns on `threads` threads (see the file comment).
std::vector<std::pair<int64_t, int64_t>> plan_slices(int64_t N, int threads) {
  const int64_t max_slice = std::max<int64_t>(kSliceAlign, g_max_slice.load());
  const int64_t per_thread = (N + threads - 1) / threads;
  const int64_t per_thread_slices = (per_thread + max_slice - 1) / max_slice;
  const int64_t want = std::max<int64_t>(1, threads * per_thread_slices);
  int64_t width = ((N + want - 1) / want + kSliceAlign - 1) / kSliceAlign * kSliceAlign;
  std::vector<std::pair<int64_t, int64_t>> out;  // (n0, n)
  for (int64_t n0 = 0; n0 < N; n0 += width) out.push_back({n0, std::min(width, N - n0)});
  return out;
}

// c [M, N] (ldc) = alpha * s [M, N] (lds) + beta * c; beta == 0 never reads c.
void scale_accumulate(const float* s, int64_t lds, float* c, int64_t ldc, int64_t M, int64_t N,
                      float alpha, float beta) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      c[m * ldc + n] = alpha * s[m * lds + n] + (beta == 0.0f ? 0.0f : beta * c[m * ldc + n]);
}

#if defined(UNMASK_WITH_DNNL)
using dnnl::memory;
using Dims = memory::dims;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One column slice W[n0 : n0 + n, :]^T ([K, n]) in oneDNN's packed layout.
struct DnnlSlice {
  int64_t n0 = 0, n = 0;
  memory::desc wdesc;  // the packed layout
  memory packed;       // a view into DnnlWeight::buffer
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct DnnlWeight final : ops::PackedWeight::Impl {
  int64_t N = 0, K = 0;
  memory::data_type type = memory::data_type::f32;  // of the packed weights and of the calls' a
  std::vector<DnnlSlice> slices;
  std::unique_ptr<void, FreeDeleter> buffer;  // all slices, back to back (64-byte aligned)
};

// One buffer for all slices of a weight, 2 MiB-aligned with transparent huge pages requested
// (madvise mode on the target): fewer page faults when packing (each 4 KiB fault costs ~10 us
// in the VM) and fewer TLB misses while the GEMM streams the weights. Only whole 2 MiB pages
// inside the buffer become huge pages, so the tail costs no extra resident memory.
void* alloc_packed(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  void* p = nullptr;
  if (posix_memalign(&p, kHuge, std::max<size_t>(bytes, 64)) != 0) throw std::bad_alloc();
  if (g_huge_pages.load() && bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
  return p;
}

// A matmul primitive for src [M, K] (lda) x weights [K, n] (any layout) -> dst [M, n] (ldc).
struct Prim {
  dnnl::matmul prim;
  memory::desc src, wdesc, dst, scratch;
};

memory::desc strided(int64_t rows, int64_t cols, int64_t ld) {
  return memory::desc(Dims{rows, cols}, memory::data_type::f32, Dims{ld, 1});
}

// Fused epilogue inside the primitive (bench option, off by default: see GEMM_CHOICE.md).
struct Fused {
  bool bias = false;
  ops::Activation act = ops::Activation::none;
};

// type: of a and the weights (f32, or bf16 with an f32 dst: fp32 accumulation). plain: the
// weights are a row-major [K, n] matrix (gemm_tile_bf16), else the layout oneDNN prefers.
dnnl::matmul::primitive_desc make_pd(int64_t M, int64_t K, int64_t n, int64_t lda, int64_t ldc, Fused f,
                                     memory::data_type type, bool plain = false) {
  memory::desc w_any(Dims{K, n}, type, plain ? memory::format_tag::ab : memory::format_tag::any);
  memory::desc bias_desc(Dims{1, n}, memory::data_type::f32, memory::format_tag::ab);
  const memory::desc src(Dims{M, K}, type, Dims{lda, 1});
  dnnl::matmul::desc d = f.bias ? dnnl::matmul::desc(src, w_any, bias_desc, strided(M, n, ldc))
                                : dnnl::matmul::desc(src, w_any, strided(M, n, ldc));
  // User scratchpad: the library's default scratchpad is shared between primitives (this
  // Debian build lacks DNNL_ENABLE_CONCURRENT_EXEC), so two pool threads running primitives at
  // once would overwrite each other's A-copy buffers; each thread passes its own instead.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (f.act != ops::Activation::none) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f,
                      f.act == ops::Activation::gelu        ? dnnl::algorithm::eltwise_gelu_erf
                      : f.act == ops::Activation::gelu_tanh ? dnnl::algorithm::eltwise_gelu_tanh
                      : f.act == ops::Activation::relu      ? dnnl::algorithm::eltwise_relu
                                                            : dnnl::algorithm::eltwise_tanh,
                      0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(d, attr, engine());
}

// The global primitive cache (see the file comment). Bounded: cleared when it grows past
// kMaxPrims entries (many distinct M values, e.g. a long run of variable-length batches).
constexpr size_t kMaxPrims = 512;
std::mutex g_prim_mutex;
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>, std::shared_ptr<const Prim>> g_prims;

std::shared_ptr<const Prim> get_prim(int64_t M, int64_t K, int64_t n, int64_t lda, int64_t ldc, Fused f,
                                     memory::data_type type, bool plain = false) {
  const auto key = std::make_tuple(M, K, n, lda, ldc, ((int(type) * 2 + int(plain)) * 2 + int(f.bias)) * 16 + int(f.act));
  std::lock_guard<std::mutex> lock(g_prim_mutex);
  auto it = g_prims.find(key);
  if (it != g_prims.end()) return it->second;
  if (g_prims.size() >= kMaxPrims) g_prims.clear();
  auto pd = make_pd(M, K, n, lda, ldc, f, type, plain);
  auto p = std::make_shared<Prim>(Prim{dnnl::matmul(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc()});
  g_prims.emplace(key, p);
  return p;
}

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Reorders `from` into `to` on the calling thread, with a thread-local scratchpad (see make_pd).
void reorder(memory from, memory to) {
  thread_local std::vector<float> pad_buf;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(from, to, attr);
  const size_t bytes = pd.scratchpad_desc().get_size();
  if (pad_buf.size() * 4 < bytes + 64) pad_buf.resize(bytes / 4 + 16);
  memory pad(pd.scratchpad_desc(), engine(), pad_buf.data());
  dnnl::reorder(pd).execute(thread_stream(), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, pad}});
  thread_stream().wait();
}

// Thread-local scratch of at least `n` floats (alpha/beta staging, slow-path weights).
float* scratch(std::vector<float>& buf, int64_t n) {
  if (int64_t(buf.size()) < n) buf.resize(size_t(n));
  return buf.data();
}

ops::PackedWeight pack_dnnl(Context& ctx, const Tensor& w, DType compute) {
  const int64_t N = w.size(0), K = w.size(1);
  auto impl = std::make_shared<DnnlWeight>();
  impl->N = N;
  impl->K = K;
  impl->type = compute == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  omp_set_num_threads(1);  // the reorders run on this thread; no OpenMP team
  int64_t bytes = 0;
  for (auto [n0, n] : plan_slices(N, ctx.num_threads())) {
    DnnlSlice sl;
    sl.n0 = n0;
    sl.n = n;
    sl.wdesc = make_pd(kPackM, K, n, K, N, {}, impl->type).weights_desc();
    bytes += (int64_t(sl.wdesc.get_size()) + 63) / 64 * 64;
    impl->slices.push_back(std::move(sl));
  }
  impl->buffer.reset(alloc_packed(size_t(bytes)));
  char* at = static_cast<char*>(impl->buffer.get());
  for (DnnlSlice& sl : impl->slices) {
    sl.packed = memory(sl.wdesc, engine(), at);
    at += (sl.wdesc.get_size() + 63) / 64 * 64;
    // W[n0:n0+n, :] is W^T[:, n0:n0+n]: [K, n] with strides (1, K).
    memory::desc src_desc(Dims{K, sl.n}, memory::data_type::f32, Dims{1, K});
    memory src(src_desc, engine(), const_cast<float*>(w.data<float>() + sl.n0 * K));
    reorder(src, sl.packed);  // f32 -> bf16 rounds to nearest even
  }
  return ops::PackedWeight(std::move(impl), N, K, Device::cpu, bytes, compute);
}

// op(x) [rows, cols] of a row-major x (ld) -> bf16 [rows, cols] (ld cols), rounded to nearest even.
void to_bf16(bool trans, const float* x, int64_t ld, int64_t rows, int64_t cols, std::vector<uint16_t>& out) {
  if (int64_t(out.size()) < rows * cols) out.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < cols; ++q) out[size_t(r * cols + q)] = f32_to_bf16(trans ? x[q * ld + r] : x[r * ld + q]);
}

// One task: rows [m0, m0 + mlen) of slice `sl` (see the file comment).
void run_dnnl_tile(const DnnlWeight& W, const DnnlSlice& sl, const ops::GemmParams& p, int64_t m0,
                   int64_t mlen, const CpuKernels& k) {
  thread_local std::vector<float> out_buf, w_buf, pad_buf;
  thread_local std::vector<uint16_t> a16;
  omp_set_num_threads(1);
  const float* a = p.a + m0 * p.lda;
  const bool bf16 = W.type == memory::data_type::bf16;
  if (bf16) to_bf16(false, a, p.lda, mlen, W.K, a16);  // this tile's rows of a ([mlen, K], ld K): M K of M K n work
  float* c = p.c + m0 * p.ldc + sl.n0;
  const bool direct = p.alpha == 1.0f && p.beta == 0.0f;  // write c in place
  float* dst = direct ? c : scratch(out_buf, mlen * sl.n);
  const int64_t ldd = direct ? p.ldc : sl.n;
  Fused fused;
  if (direct && g_fuse_post_ops.load()) fused = {p.bias != nullptr, p.act};
  auto prim = get_prim(mlen, W.K, sl.n, bf16 ? W.K : p.lda, ldd, fused, W.type);
  memory weights = sl.packed;
  dnnl::stream& s = thread_stream();
  if (prim->wdesc != sl.wdesc) {  // this M wants another layout: reorder for this call
    g_slow_reorders.fetch_add(1, std::memory_order_relaxed);
    weights = memory(prim->wdesc, engine(), scratch(w_buf, int64_t(prim->wdesc.get_size() / 4) + 16));
    reorder(sl.packed, weights);
  }
  memory src(prim->src, engine(), bf16 ? static_cast<void*>(a16.data()) : const_cast<float*>(a));
  memory out(prim->dst, engine(), dst);
  memory pad(prim->scratch, engine(), scratch(pad_buf, int64_t(prim->scratch.get_size() / 4) + 16));
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights},
                                          {DNNL_ARG_DST, out}, {DNNL_ARG_SCRATCHPAD, pad}};
  if (fused.bias)
    args[DNNL_ARG_BIAS] = memory(memory::desc(Dims{1, sl.n}, memory::data_type::f32, memory::format_tag::ab),
                                 engine(), const_cast<float*>(p.bias + sl.n0));
  prim->prim.execute(s, args);
  s.wait();
  if (!direct) scale_accumulate(dst, ldd, c, p.ldc, mlen, sl.n, p.alpha, p.beta);
  if ((p.bias && !fused.bias) || (p.act != ops::Activation::none && fused.act == ops::Activation::none))
    k.bias_act_rows(c, p.ldc, p.bias ? p.bias + sl.n0 : nullptr, c, p.ldc, mlen, sl.n, p.act);
}
#endif  // UNMASK_WITH_DNNL

}  // namespace

void gemm_tile_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                    const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#if defined(UNMASK_WITH_DNNL)
  thread_local std::vector<uint16_t> a16, b16;
  thread_local std::vector<float> out_buf, pad_buf;
  omp_set_num_threads(1);
  to_bf16(ta, a, lda, M, K, a16);  // op(a) [M, K]
  to_bf16(tb, b, ldb, K, N, b16);  // op(b) [K, N]
  const bool direct = alpha == 1.0f && beta == 0.0f;
  float* dst = direct ? c : scratch(out_buf, M * N);
  const int64_t ldd = direct ? ldc : N;
  auto prim = get_prim(M, K, N, K, ldd, {}, memory::data_type::bf16, true);
  memory src(prim->src, engine(), a16.data()), wei(prim->wdesc, engine(), b16.data()), out(prim->dst, engine(), dst);
  memory pad(prim->scratch, engine(), scratch(pad_buf, int64_t(prim->scratch.get_size() / 4) + 16));
  dnnl::stream& s = thread_stream();
  prim->prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, out}, {DNNL_ARG_SCRATCHPAD, pad}});
  s.wait();
  if (!direct) scale_accumulate(dst, ldd, c, ldc, M, N, alpha, beta);
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb, (void)beta, (void)c,
      (void)ldc;
  throw Unsupported("bf16 GEMMs need the oneDNN build");
#endif
}

ops::PackedWeight pack_weight(Context& ctx, const Tensor& w, DType compute) {
#if defined(UNMASK_WITH_DNNL)
  if (compute == DType::bf16 || (gemm_backend() == GemmBackend::onednn && w.size(0) > 0 && w.size(1) > 0))
    return pack_dnnl(ctx, w, compute);
#endif
  UNMASK_CHECK(compute == DType::f32, "pack_weight: bf16 needs the oneDNN build");
  auto impl = std::make_shared<BlasWeight>();
  impl->w = w;
  return ops::PackedWeight(std::move(impl), w.size(0), w.size(1), Device::cpu, 0);
}

void gemm_packed(Context& ctx, const ops::GemmParams& p, const ops::PackedWeight& w) {
  if (p.M == 0 || p.N == 0) return;
  if (auto* blas = dynamic_cast<const BlasWeight*>(w.impl())) {
    ops::GemmParams q = p;
    q.b = blas->w.data<float>();
    q.ldb = p.K;
    q.tb = ops::Trans::yes;
    return gemm(ctx, q);
  }
#if defined(UNMASK_WITH_DNNL)
  const auto& W = dynamic_cast<const DnnlWeight&>(*w.impl());
  const CpuKernels& k = kernels();
  const int64_t rb = g_row_block.load() > 0 ? std::min(g_row_block.load(), p.M) : p.M;
  const int64_t row_tiles = (p.M + rb - 1) / rb, slices = int64_t(W.slices.size());
  // Task order: slice-major (each thread keeps to its own columns of W), or row-major when
  // g_row_major and there are at least as many row blocks as threads (each thread keeps to its
  // own rows of a and c and streams all of W).
  const bool row_major = g_row_major.load() && row_tiles >= ctx.num_threads();
  ctx.parallel_for(slices * row_tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const DnnlSlice& sl = W.slices[size_t(row_major ? t % slices : t / row_tiles)];
      const int64_t m0 = (row_major ? t / slices : t % row_tiles) * rb;
      run_dnnl_tile(W, sl, p, m0, std::min(rb, p.M - m0), k);
    }
  });
#else
  throw Error("gemm_packed: weight was packed for a backend this build lacks");
#endif
}

void packed_gemm_tuning_override_for_bench(int64_t row_block, int64_t max_slice, bool huge_pages,
                                           bool fuse_post_ops, bool row_major) {
  g_huge_pages.store(huge_pages);
  g_fuse_post_ops.store(fuse_post_ops);
  g_row_major.store(row_major);
  g_row_block.store(row_block >= 0 ? row_block : kRowBlock);
  g_max_slice.store(max_slice > 0 ? max_slice : kMaxSlice);
}

int64_t packed_gemm_slow_reorders() { return g_slow_reorders.load(); }

const char* bf16_unit() {
#if defined(UNMASK_WITH_DNNL)
  // What oneDNN dispatches to (it asks the OS for AMX tiles itself; a VM may hide them).
  static const char* unit = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    if (isa == dnnl::cpu_isa::avx512_core_amx) return "amx";
    if (isa == dnnl::cpu_isa::avx512_core_bf16) return "avx512_bf16";
    return "";
  }();
  return unit;
#else
  return "";
#endif
}

}  // namespace unmask::cpu
