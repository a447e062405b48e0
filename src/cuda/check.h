// cuda/check.h: host-side check macros for CUDA runtime and cuBLAS(Lt) calls.
//
// Both throw unmask::Error carrying the failing statement's text, the library's error name and
// string, and file:line (tcnn common_host.h style; never exit()). Use them in host code only;
// destructors must not use them (they swallow errors instead, see allocator.cc).
//
//   CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
//   CUBLAS_CHECK(cublasLtMatmul(...));
//   CUDA_CHECK_LAUNCH();   // after every <<<>>> launch: cudaGetLastError()
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "unmask/error.h"

namespace unmask::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* stmt, const char* file, int line) {
  throw Error("CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ") in `", stmt, "` at ",
              file, ":", line);
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t s, const char* stmt, const char* file, int line) {
  throw Error("cuBLAS error ", cublasGetStatusName(s), " (", cublasGetStatusString(s), ") in `", stmt,
              "` at ", file, ":", line);
}

}  // namespace unmask::cuda::detail

#define CUDA_CHECK(stmt)                                                                      \
  do {                                                                                        \
    cudaError_t unmask_cuda_err_ = (stmt);                                                    \
    if (unmask_cuda_err_ != cudaSuccess)                                                      \
      ::unmask::cuda::detail::throw_cuda_error(unmask_cuda_err_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(stmt)                                                                      \
  do {                                                                                          \
    cublasStatus_t unmask_cublas_st_ = (stmt);                                                  \
    if (unmask_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::unmask::cuda::detail::throw_cublas_error(unmask_cublas_st_, #stmt, __FILE__, __LINE__); \
  } while (0)

/// Checks the launch just made (bad configuration, missing kernel image). Asynchronous faults
/// surface at the next synchronising call.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
