// dist/nccl_comm.h: GPU gradient all-reduce with NCCL, bootstrapped over a Communicator (MPI).
//
//   Communicator& comm = Communicator::world();
//   cudaSetDevice(comm.local_rank());                  // one GPU per rank
//   dist::NcclCommunicator nccl(comm);                 // collective: every rank constructs it
//   nccl.allreduce_sum(grad_dev, n, stream, /*average=*/true);   // queued on `stream`
//   nccl.synchronize(stream, "gradient bucket 3");     // waits with the communicator's timeout
//
// Built only in CUDA builds where CMake finds NCCL (UNMASK_HAVE_NCCL); it has not run on this
// project's CI machine (no GPU). Unlike Communicator::allreduce_sum, NCCL chooses the reduction
// order (ring/tree by size and topology): results are identical across runs with the same ranks,
// GPUs and NCCL version and settings, but not equal to a rank-order sum.
#pragma once
#include <cstdint>
#include <memory>

#include "unmask/dist.h"

namespace unmask::dist {

class NcclCommunicator {
 public:
  /// True in builds with NCCL.
  static bool available();
  /// Rank 0 creates the NCCL unique id, `boot` broadcasts it, every rank joins on its current
  /// CUDA device. Collective over `boot`.
  explicit NcclCommunicator(Communicator& boot);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  /// In place on device memory: data = sum (or mean) over ranks, queued on `stream` (a
  /// cudaStream_t). Returns at once.
  void allreduce_sum(float* device_data, int64_t n, void* stream, bool average = false);
  /// Blocks until `stream` is idle. After boot.timeout_s(), or on an NCCL error of a peer, it
  /// aborts the NCCL communicator and the job naming `what`.
  void synchronize(void* stream, const char* what);

  struct Impl;

 private:
  Communicator& boot_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace unmask::dist
