// cuda/conv_cudnn.cc: ops::conv2d on a CUDA context through cuDNN (the DALL-E tokenizer's
// convolutions; inference only).
//
// cuDNN is loaded at the first convolution (dlopen of libcudnn.so.9, its legacy convolution
// API), not linked: a GPU machine without cuDNN still runs everything else, and a convolution
// there fails with an error naming the library. fp32 in and out with FMA math (no TF32), the
// fastest algorithm cuDNN's heuristics rank first that fits 256 MiB of workspace; descriptors
// per call (a tokenizer runs a few dozen convolutions a batch), one handle per context stream.
#include <dlfcn.h>
#if __has_include(<cudnn.h>)
#include <cudnn.h>  // only to check the values below against it
#endif

#include <cstddef>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/check.h"
#include "cuda/cuda_state.h"
#include "cuda/ops_cuda.h"
#include "unmask/error.h"

namespace unmask::cuda {

namespace {

// The few cuDNN types and values this file uses (cudnn_graph.h / cudnn_cnn.h, cuDNN 9), so the
// build needs no cuDNN headers either.
using Handle = void*;
using Desc = void*;
using Status = int;
constexpr int kFloat = 0;           // CUDNN_DATA_FLOAT
constexpr int kNchw = 0;            // CUDNN_TENSOR_NCHW
constexpr int kCrossCorrelation = 1;  // CUDNN_CROSS_CORRELATION (what F.conv2d computes)
constexpr int kFmaMath = 3;         // CUDNN_FMA_MATH: fp32 FMA, no TF32
constexpr size_t kMaxWorkspace = size_t(256) << 20;

struct AlgoPerf {  // cudnnConvolutionFwdAlgoPerf_t
  int algo;
  Status status;
  float time;
  size_t memory;
  int determinism, math_type;
  int reserved[3];
};

#if __has_include(<cudnn.h>)  // where the headers are (the CI build), the values are checked
static_assert(kFloat == CUDNN_DATA_FLOAT && kNchw == CUDNN_TENSOR_NCHW && kCrossCorrelation == CUDNN_CROSS_CORRELATION &&
              kFmaMath == CUDNN_FMA_MATH);
static_assert(sizeof(AlgoPerf) == sizeof(cudnnConvolutionFwdAlgoPerf_t) &&
              offsetof(AlgoPerf, memory) == offsetof(cudnnConvolutionFwdAlgoPerf_t, memory));
#endif

struct Cudnn {
  void* lib = nullptr;
  std::string error;
  Status (*create)(Handle*) = nullptr;
  Status (*set_stream)(Handle, cudaStream_t) = nullptr;
  const char* (*error_string)(Status) = nullptr;
  Status (*create_tensor)(Desc*) = nullptr;
  Status (*set_tensor)(Desc, int, int, int, int, int, int) = nullptr;
  Status (*destroy_tensor)(Desc) = nullptr;
  Status (*create_filter)(Desc*) = nullptr;
  Status (*set_filter)(Desc, int, int, int, int, int, int) = nullptr;
  Status (*destroy_filter)(Desc) = nullptr;
  Status (*create_conv)(Desc*) = nullptr;
  Status (*set_conv)(Desc, int, int, int, int, int, int, int, int) = nullptr;
  Status (*set_math)(Desc, int) = nullptr;
  Status (*destroy_conv)(Desc) = nullptr;
  Status (*get_algos)(Handle, Desc, Desc, Desc, Desc, int, int*, AlgoPerf*) = nullptr;
  Status (*forward)(Handle, const void*, Desc, const void*, Desc, const void*, Desc, int, void*, size_t, const void*,
                    Desc, void*) = nullptr;
  Status (*add_tensor)(Handle, const void*, Desc, const void*, const void*, Desc, void*) = nullptr;
};

const Cudnn& cudnn() {
  static Cudnn c;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {"libcudnn.so.9", "libcudnn.so"})
      if ((c.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!c.lib) {
      c.error = std::string("cannot load cuDNN (libcudnn.so.9): ") + dlerror();
      return;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(c.lib, name));
      if (!fn && c.error.empty()) c.error = std::string("cuDNN lacks ") + name;
    };
    sym(c.create, "cudnnCreate");
    sym(c.set_stream, "cudnnSetStream");
    sym(c.error_string, "cudnnGetErrorString");
    sym(c.create_tensor, "cudnnCreateTensorDescriptor");
    sym(c.set_tensor, "cudnnSetTensor4dDescriptor");
    sym(c.destroy_tensor, "cudnnDestroyTensorDescriptor");
    sym(c.create_filter, "cudnnCreateFilterDescriptor");
    sym(c.set_filter, "cudnnSetFilter4dDescriptor");
    sym(c.destroy_filter, "cudnnDestroyFilterDescriptor");
    sym(c.create_conv, "cudnnCreateConvolutionDescriptor");
    sym(c.set_conv, "cudnnSetConvolution2dDescriptor");
    sym(c.set_math, "cudnnSetConvolutionMathType");
    sym(c.destroy_conv, "cudnnDestroyConvolutionDescriptor");
    sym(c.get_algos, "cudnnGetConvolutionForwardAlgorithm_v7");
    sym(c.forward, "cudnnConvolutionForward");
    sym(c.add_tensor, "cudnnAddTensor");
  });
  if (!c.error.empty())
    throw Unsupported("conv2d (cuda): ", c.error,
                      Hint("install cuDNN 9 (NVIDIA's libcudnn9-cuda packages) on this machine, or run the "
                           "tokenizer on the CPU"));
  return c;
}

void check(const Cudnn& c, Status s, const char* what) {
  if (s != 0) throw Error("conv2d (cuda): ", what, " failed: ", c.error_string ? c.error_string(s) : "?", " (", s, ")");
}

// One handle per stream (handles are not shared between streams that run at once).
Handle handle_for(const Cudnn& c, cudaStream_t stream) {
  static std::mutex m;
  static std::vector<std::pair<cudaStream_t, Handle>> handles;
  std::lock_guard<std::mutex> lock(m);
  for (auto& [s, h] : handles)
    if (s == stream) return h;
  Handle h = nullptr;
  check(c, c.create(&h), "cudnnCreate");
  check(c, c.set_stream(h, stream), "cudnnSetStream");
  handles.emplace_back(stream, h);
  return h;
}

// Descriptors destroyed on every path out.
struct Descs {
  const Cudnn& c;
  Desc x = nullptr, y = nullptr, b = nullptr, w = nullptr, conv = nullptr;
  explicit Descs(const Cudnn& cu) : c(cu) {}
  ~Descs() {
    for (Desc d : {x, y, b})
      if (d) c.destroy_tensor(d);
    if (w) c.destroy_filter(w);
    if (conv) c.destroy_conv(conv);
  }
};

}  // namespace

void conv2d(Context& ctx, const ops::Conv2dParams& p) {
  const Cudnn& c = cudnn();
  CudaState& st = cuda_state(ctx);
  Handle h = handle_for(c, st.stream);
  UNMASK_CHECK(p.B < (1 << 30) && p.Cin < (1 << 30) && p.Cout < (1 << 30) && p.H < (1 << 30) && p.W < (1 << 30),
               "conv2d (cuda): dimensions above 2^30");
  Descs d(c);
  check(c, c.create_tensor(&d.x), "cudnnCreateTensorDescriptor");
  check(c, c.set_tensor(d.x, kNchw, kFloat, int(p.B), int(p.Cin), int(p.H), int(p.W)), "the input descriptor");
  check(c, c.create_tensor(&d.y), "cudnnCreateTensorDescriptor");
  check(c, c.set_tensor(d.y, kNchw, kFloat, int(p.B), int(p.Cout), int(p.OH), int(p.OW)), "the output descriptor");
  check(c, c.create_filter(&d.w), "cudnnCreateFilterDescriptor");
  check(c, c.set_filter(d.w, kFloat, kNchw, int(p.Cout), int(p.Cin), int(p.k), int(p.k)), "the filter descriptor");
  check(c, c.create_conv(&d.conv), "cudnnCreateConvolutionDescriptor");
  check(c, c.set_conv(d.conv, int(p.padding), int(p.padding), int(p.stride), int(p.stride), 1, 1, kCrossCorrelation,
                      kFloat),
        "the convolution descriptor");
  check(c, c.set_math(d.conv, kFmaMath), "cudnnSetConvolutionMathType");
  AlgoPerf perf[8];
  int found = 0;
  check(c, c.get_algos(h, d.x, d.w, d.conv, d.y, 8, &found, perf), "cudnnGetConvolutionForwardAlgorithm_v7");
  int pick = -1;
  for (int i = 0; i < found && pick < 0; ++i)
    if (perf[i].status == 0 && perf[i].memory <= kMaxWorkspace) pick = i;
  UNMASK_CHECK(pick >= 0, "conv2d (cuda): cuDNN offers no algorithm for [", p.B, ", ", p.Cin, ", ", p.H, ", ", p.W,
               "] * [", p.Cout, ", ", p.Cin, ", ", p.k, ", ", p.k, "] within ", kMaxWorkspace >> 20, " MiB of workspace");
  void* workspace = perf[pick].memory ? device_malloc(perf[pick].memory, st.stream) : nullptr;
  const float one = 1.0f, zero = 0.0f;
  const Status s = c.forward(h, &one, d.x, p.x, d.w, p.w, d.conv, perf[pick].algo, workspace, perf[pick].memory, &zero,
                             d.y, p.y);
  if (workspace) device_free(workspace);  // stream-ordered: reused only after the convolution
  check(c, s, "cudnnConvolutionForward");
  if (p.bias) {
    check(c, c.create_tensor(&d.b), "cudnnCreateTensorDescriptor");
    check(c, c.set_tensor(d.b, kNchw, kFloat, 1, int(p.Cout), 1, 1), "the bias descriptor");
    check(c, c.add_tensor(h, &one, d.b, p.bias, &one, d.y, p.y), "cudnnAddTensor (the bias)");
  }
}

}  // namespace unmask::cuda
