// bench/gpu/bert_infer_gpu.cc: BERT-base encoder forward in bf16 on one GPU with unmask's CUDA
// kernels (unmask_gpu_bench).
//
// A compact forward written directly against the kernel layer (raw device pointers, one
// stream), from random weights:
//   x[N,C]    = LayerNorm(word[ids] + pos[t] + type[0])             embedding_layernorm_forward
//   per layer (C = 768, NH = 12, HS = 64, I = 3072, L = 12):
//     qkv[N,3C] = x Wqkv^T + bqkv                                     gemm_lt (bias epilogue)
//     a[N,C]    = attention(q, k, v)  (column slices of qkv)          attention_forward (flash)
//     h[N,C]    = a Wo^T + bo                                         gemm_lt (bias epilogue)
//     x         = LayerNorm(h + x)                                    layernorm_forward
//     f[N,I]    = gelu(x W1^T + b1)                                   gemm_lt (+ bias/GELU kernel
//                                                                      for exact GELU; cuBLASLt
//                                                                      epilogue for gelu_tanh)
//     h         = f W2^T + b2                                         gemm_lt (bias epilogue)
//     x         = LayerNorm(h + x)                                    layernorm_forward
// Full-length sequences (padded layout, no mask), as in the AITemplate and PyTorch tables.
//
// Timing: one eager forward (plans, validation), then the forward is captured into a CUDA
// graph per shape and replayed: `--warmup` replays, then `--iters` replays each timed with a
// pair of cudaEvents; the median is reported. Before timing, every shape is validated: the
// output must be finite and every checked row must have mean ~0 and variance ~1 (the final
// LayerNorm has gamma = 1, beta = 0). The kernels themselves are checked against float64 by
// unmask_cuda_tests.
//
// FLOPs per forward: L * (2 N (3C^2 + C^2 + 2 C I) + 4 B T^2 C)  (GEMMs + QK^T + PV).
//
//   unmask_gpu_bench [--batches 1,2,4] [--seqs 64,128] [--iters 20] [--warmup 5]
//                    [--peak-tflops 989] [--act gelu|gelu_tanh] [--no-graph]
//                    [--max-tokens 262144] [--budget-s 150] [--json FILE]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cuda/allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/flash/flash_api.h"
#include "cuda/gemm_cublaslt.h"
#include "cuda/kernels.h"
#include "unmask/context.h"

using namespace unmask;

namespace {

struct Options {
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> seqs = {64, 128, 384, 1024, 4096};
  int iters = 20, warmup = 5, layers = 12;
  double peak_tflops = 989.0;  // H100 SXM dense bf16
  ops::Activation act = ops::Activation::gelu;
  bool graph = true;
  int64_t max_tokens = 262144;
  double budget_s = 150.0;
  std::string json;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    const char* c = std::strchr(p, ',');
    if (!c) break;
    p = c + 1;
  }
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) throw Error("missing value after ", a);
      return argv[++i];
    };
    if (a == "--batches") o.batches = parse_list(next());
    else if (a == "--seqs") o.seqs = parse_list(next());
    else if (a == "--iters") o.iters = std::atoi(next());
    else if (a == "--warmup") o.warmup = std::atoi(next());
    else if (a == "--layers") o.layers = std::atoi(next());
    else if (a == "--peak-tflops") o.peak_tflops = std::atof(next());
    else if (a == "--act") o.act = std::string(next()) == "gelu_tanh" ? ops::Activation::gelu_tanh : ops::Activation::gelu;
    else if (a == "--no-graph") o.graph = false;
    else if (a == "--max-tokens") o.max_tokens = std::atoll(next());
    else if (a == "--budget-s") o.budget_s = std::atof(next());
    else if (a == "--json") o.json = next();
    else if (a == "--help" || a == "-h") {
      std::printf("see the header of bench/gpu/bert_infer_gpu.cc\n");
      std::exit(0);
    } else {
      throw Error("unknown option ", a);
    }
  }
  return o;
}

constexpr int64_t kC = 768, kNH = 12, kHS = 64, kI = 3072, kV = 30522;

/// Device memory from the caching allocator, freed at scope exit.
struct DeviceArray {
  void* p = nullptr;
  explicit DeviceArray(size_t bytes, void* stream) : p(cuda::device_malloc(bytes, stream)) {}
  ~DeviceArray() { cuda::device_free(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

/// bf16 values ~ N(0, sd) (or a constant when sd == 0) uploaded to `dst`.
void fill_bf16(void* dst, size_t n, double sd, float constant, std::mt19937_64& rng) {
  std::vector<uint16_t> h(n);
  std::normal_distribution<float> d(0.0f, float(sd));
  for (auto& x : h) x = f32_to_bf16(sd > 0 ? d(rng) : constant);
  CUDA_CHECK(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice));
}

/// One layer's weights, views into the flat parameter buffer. W* are [out, in] (nn.Linear).
struct Layer {
  uint16_t *wqkv, *bqkv, *wo, *bo, *ln1_g, *ln1_b, *w1, *b1, *w2, *b2, *ln2_g, *ln2_b;
};

struct Model {
  int P = 512;  // position rows (>= the longest sequence benchmarked)
  uint16_t *word = nullptr, *pos = nullptr, *type = nullptr, *emb_g = nullptr, *emb_b = nullptr;
  std::vector<Layer> layers;
};

/// Activations for up to N tokens.
struct Buffers {
  uint16_t *x, *qkv, *attn, *h, *f;
  int32_t *ids, *pos_ids;
};

void forward(cuda::CudaState& st, const Model& m, const Buffers& b, int B, int T, ops::Activation act) {
  cudaStream_t s = st.stream;
  const int64_t N = int64_t(B) * T;
  cuda::embedding_layernorm_forward(b.x, kC, b.ids, b.pos_ids, nullptr, m.word, m.pos, m.type, m.emb_g, m.emb_b,
                                    DType::bf16, 1e-12f, N, kC, DType::bf16, s);
  cuda::FlashFwdParams ap;
  ap.q = b.qkv;
  ap.k = b.qkv + kC;
  ap.v = b.qkv + 2 * kC;
  ap.o = b.attn;
  ap.q_row_stride = ap.k_row_stride = ap.v_row_stride = 3 * kC;
  ap.o_row_stride = kC;
  ap.num_heads = int(kNH);
  ap.head_dim = int(kHS);
  ap.batch = B;
  ap.max_seqlen = T;
  ap.scale = float(1.0 / std::sqrt(double(kHS)));
  ap.scale_log2 = float(1.0 / std::sqrt(double(kHS)) * 1.4426950408889634);
  ap.dtype = DType::bf16;
  auto linear = [&](const uint16_t* x, int64_t in, const uint16_t* w, const uint16_t* bias, int64_t out, uint16_t* y,
                    ops::Activation a) {
    cuda::GemmLtParams g;
    g.a = x;
    g.lda = in;
    g.b = w;
    g.ldb = in;
    g.tb = ops::Trans::yes;
    g.c = y;
    g.ldc = out;
    g.M = N;
    g.N = out;
    g.K = in;
    g.ab_dtype = g.c_dtype = g.bias_dtype = DType::bf16;
    g.bias = bias;
    g.act = a;
    cuda::gemm_lt(st, g, s);
  };
  for (const Layer& l : m.layers) {
    linear(b.x, kC, l.wqkv, l.bqkv, 3 * kC, b.qkv, ops::Activation::none);
    cuda::attention_forward(ap, s);
    linear(b.attn, kC, l.wo, l.bo, kC, b.h, ops::Activation::none);
    cuda::layernorm_forward(b.x, kC, b.h, kC, b.x, kC, l.ln1_g, l.ln1_b, DType::bf16, 1e-12f, N, kC, DType::bf16, s);
    linear(b.x, kC, l.w1, l.b1, kI, b.f, act);
    linear(b.f, kI, l.w2, l.b2, kC, b.h, ops::Activation::none);
    cuda::layernorm_forward(b.x, kC, b.h, kC, b.x, kC, l.ln2_g, l.ln2_b, DType::bf16, 1e-12f, N, kC, DType::bf16, s);
  }
}

/// Output checks: finite, and rows normalised (mean ~0, var ~1; the last LN has gamma 1,
/// beta 0). Returns an empty string when fine.
std::string validate(const Buffers& b, int64_t N) {
  const int64_t rows[] = {0, N / 3, N / 2, N - 1};
  std::vector<uint16_t> h(static_cast<size_t>(kC));
  for (int64_t r : rows) {
    CUDA_CHECK(cudaMemcpy(h.data(), b.x + r * kC, size_t(kC) * 2, cudaMemcpyDeviceToHost));
    double mean = 0, var = 0;
    for (uint16_t v : h) {
      const double x = bf16_to_f32(v);
      if (!std::isfinite(x)) return "non-finite output in row " + std::to_string(r);
      mean += x;
    }
    mean /= double(kC);
    for (uint16_t v : h) var += (bf16_to_f32(v) - mean) * (bf16_to_f32(v) - mean);
    var /= double(kC);
    if (std::fabs(mean) > 0.02 || std::fabs(var - 1.0) > 0.05)
      return "row " + std::to_string(r) + " mean " + std::to_string(mean) + " var " + std::to_string(var);
  }
  return "";
}

double forward_flops(int layers, int B, int T) {
  const double N = double(B) * T, C = double(kC), I = double(kI);
  return layers * (2 * N * (3 * C * C + C * C + 2 * C * I) + 4.0 * B * double(T) * T * C);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const auto t_start = std::chrono::steady_clock::now();
    Context ctx(ContextOptions{.num_threads = 1, .device = Device::cuda});
    cuda::CudaState& st = *ctx.cuda_state();
    void* s = ctx.cuda_stream();
    std::printf("device: %s, %d SMs; BERT-base bf16, %d layers, act %s, %s; peak %.0f TFLOP/s\n", st.props.name,
                st.props.multiProcessorCount, o.layers, o.act == ops::Activation::gelu ? "gelu (erf)" : "gelu_tanh",
                o.graph ? "CUDA graphs" : "eager", o.peak_tflops);

    int max_T = 0;
    int64_t max_N = 0;
    for (int T : o.seqs)
      for (int B : o.batches)
        if (int64_t(B) * T <= o.max_tokens) max_N = std::max(max_N, int64_t(B) * T), max_T = std::max(max_T, T);

    // ---- weights: one flat bf16 buffer ----
    Model m;
    m.P = std::max(512, max_T);
    const size_t per_layer = size_t(3 * kC * kC + 3 * kC + kC * kC + kC + 2 * kC + kI * kC + kI + kC * kI + kC + 2 * kC);
    const size_t emb = size_t(kV * kC + int64_t(m.P) * kC + 2 * kC + 2 * kC);
    const size_t n_params = emb + per_layer * size_t(o.layers);
    DeviceArray params(n_params * 2, s);
    std::mt19937_64 rng(1234);
    uint16_t* p = params.as<uint16_t>();
    auto take = [&](size_t n, double sd, float constant = 0.0f) {
      uint16_t* q = p;
      fill_bf16(q, n, sd, constant, rng);
      p += n;
      return q;
    };
    m.word = take(size_t(kV * kC), 0.02);
    m.pos = take(size_t(m.P) * kC, 0.02);
    m.type = take(size_t(2 * kC), 0.02);
    m.emb_g = take(size_t(kC), 0.0, 1.0f);
    m.emb_b = take(size_t(kC), 0.0, 0.0f);
    for (int l = 0; l < o.layers; ++l) {
      Layer L;
      L.wqkv = take(size_t(3 * kC * kC), 0.02);
      L.bqkv = take(size_t(3 * kC), 0.02);
      L.wo = take(size_t(kC * kC), 0.02);
      L.bo = take(size_t(kC), 0.02);
      L.ln1_g = take(size_t(kC), 0.0, 1.0f);
      L.ln1_b = take(size_t(kC), 0.0, 0.0f);
      L.w1 = take(size_t(kI * kC), 0.02);
      L.b1 = take(size_t(kI), 0.02);
      L.w2 = take(size_t(kC * kI), 0.02);
      L.b2 = take(size_t(kC), 0.02);
      L.ln2_g = take(size_t(kC), 0.0, 1.0f);
      L.ln2_b = take(size_t(kC), 0.0, 0.0f);
      m.layers.push_back(L);
    }
    std::printf("parameters: %.1f M (bf16), activations for up to %lld tokens\n", double(n_params) / 1e6,
                (long long)max_N);

    // ---- activations ----
    DeviceArray x(size_t(max_N * kC) * 2, s), qkv(size_t(max_N * 3 * kC) * 2, s), attn(size_t(max_N * kC) * 2, s),
        h(size_t(max_N * kC) * 2, s), f(size_t(max_N * kI) * 2, s), ids(size_t(max_N) * 4, s), pos(size_t(max_N) * 4, s);
    Buffers buf{x.as<uint16_t>(), qkv.as<uint16_t>(), attn.as<uint16_t>(), h.as<uint16_t>(), f.as<uint16_t>(),
                ids.as<int32_t>(), pos.as<int32_t>()};

    FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "w");
    std::printf("\n%6s %6s %12s %12s %10s %8s\n", "batch", "seq", "latency_ms", "QPS", "TFLOP/s", "%peak");
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    for (int T : o.seqs) {
      for (int B : o.batches) {
        const int64_t N = int64_t(B) * T;
        if (N > o.max_tokens) continue;
        const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        if (elapsed > o.budget_s) {
          std::printf("time budget of %.0f s spent; stopping before batch %d seq %d\n", o.budget_s, B, T);
          goto done;
        }
        {
          // inputs: random ids, positions 0..T-1
          std::vector<int32_t> hid(static_cast<size_t>(N)), hpos(static_cast<size_t>(N));
          std::uniform_int_distribution<int32_t> did(0, int32_t(kV - 1));
          for (int64_t i = 0; i < N; ++i) hid[size_t(i)] = did(rng), hpos[size_t(i)] = int32_t(i % T);
          CUDA_CHECK(cudaMemcpy(buf.ids, hid.data(), size_t(N) * 4, cudaMemcpyHostToDevice));
          CUDA_CHECK(cudaMemcpy(buf.pos_ids, hpos.data(), size_t(N) * 4, cudaMemcpyHostToDevice));

          forward(st, m, buf, B, T, o.act);  // eager: builds GEMM plans, sets kernel attributes
          CUDA_CHECK(cudaStreamSynchronize(st.stream));
          const std::string bad = validate(buf, N);
          if (!bad.empty()) {
            std::printf("%6d %6d  VALIDATION FAILED: %s\n", B, T, bad.c_str());
            if (json)
              std::fprintf(json, "{\"impl\":\"unmask\",\"batch\":%d,\"seq\":%d,\"error\":\"validation: %s\"}\n", B, T,
                           bad.c_str());
            continue;
          }
          cudaGraphExec_t exec = nullptr;
          if (o.graph) {
            cudaGraph_t graph = nullptr;
            CUDA_CHECK(cudaStreamBeginCapture(st.stream, cudaStreamCaptureModeThreadLocal));
            forward(st, m, buf, B, T, o.act);
            CUDA_CHECK(cudaStreamEndCapture(st.stream, &graph));
            CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
            CUDA_CHECK(cudaGraphDestroy(graph));
          }
          auto run = [&]() {
            if (exec)
              CUDA_CHECK(cudaGraphLaunch(exec, st.stream));
            else
              forward(st, m, buf, B, T, o.act);
          };
          for (int i = 0; i < o.warmup; ++i) run();
          std::vector<float> ms(size_t(o.iters));
          for (int i = 0; i < o.iters; ++i) {
            CUDA_CHECK(cudaEventRecord(e0, st.stream));
            run();
            CUDA_CHECK(cudaEventRecord(e1, st.stream));
            CUDA_CHECK(cudaEventSynchronize(e1));
            CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(i)], e0, e1));
          }
          if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
          std::sort(ms.begin(), ms.end());
          const double med = ms[ms.size() / 2];
          const double tflops = forward_flops(o.layers, B, T) / (med * 1e-3) / 1e12;
          const double qps = B / (med * 1e-3);
          std::printf("%6d %6d %12.3f %12.1f %10.1f %7.1f%%\n", B, T, med, qps, tflops, 100.0 * tflops / o.peak_tflops);
          std::fflush(stdout);
          if (json) {
            std::fprintf(json,
                         "{\"impl\":\"unmask\",\"device\":\"%s\",\"dtype\":\"bf16\",\"act\":\"%s\",\"graph\":%s,"
                         "\"batch\":%d,\"seq\":%d,\"latency_ms\":%.4f,\"latency_min_ms\":%.4f,\"qps\":%.2f,"
                         "\"tflops\":%.2f,\"pct_peak\":%.2f,\"iters\":%d}\n",
                         st.props.name, o.act == ops::Activation::gelu ? "gelu" : "gelu_tanh", o.graph ? "true" : "false",
                         B, T, med, double(ms.front()), qps, tflops, 100.0 * tflops / o.peak_tflops, o.iters);
            std::fflush(json);
          }
        }
      }
    }
  done:
    if (json) std::fclose(json);
    const cuda::AllocatorStats a = cuda::allocator_stats();
    std::printf("\ndevice memory: peak %.2f GiB allocated, %.2f GiB reserved\n", double(a.peak_allocated_bytes) / (1u << 30),
                double(a.peak_reserved_bytes) / (1u << 30));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unmask_gpu_bench: %s\n", e.what());
    return 1;
  }
}
