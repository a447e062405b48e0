// dist/grad_sync.h: bucketed gradient all-reduce that overlaps the backward pass (PyTorch DDP's
// scheme on unmask::Communicator).
//
//   dist::GradientSync sync(comm, model.params());          // buckets of ~25 MB, built once
//   model.zero_grad();
//   for (micro-batches but the last) model.pretrain_step(...);   // accumulation: nothing reduced
//   model.pretrain_step(last...);                            // backward calls sync.mark_ready(i)
//                                                            //   as each gradient is final
//   sync.finish();                                           // grads = mean over ranks
//   opt.step(...);
// or, without hooks in backward: `model.pretrain_step(...); sync.reduce_all();`.
//
// Buckets hold the parameters in REVERSE order (backward produces the last layers' gradients
// first), each ~bucket_mb of f32 with one flat buffer. mark_ready copies a gradient into its
// bucket; when a bucket is complete (and every bucket before it has started) its iallreduce starts
// on the communication thread, while backward goes on. Buckets always start in bucket order, so
// all ranks issue the same reductions in the same order whatever order the marks come in.
// finish() starts what is left (including params never marked), waits, and writes
// sum / size back into every Param::grad. With size() == 1 all of this is a no-op.
//
// Sums are in rank order (unmask/dist.h), so the result is bitwise equal to
// ((g0 + g1) + g2) + ... divided by size, on every rank, for any bucketing and mark order.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "unmask/dist.h"
#include "unmask/train.h"

namespace unmask::dist {

struct GradientSyncOptions {
  double bucket_mb = 25.0;  // bucket capacity in MiB (PyTorch DDP's default bucket_cap_mb)
  bool average = true;      // divide the sum by size() (false: leave the sum)
};

struct GradientSyncStats {
  int64_t buckets = 0;        // number of buckets (fixed at construction)
  int64_t reductions = 0;     // bucket all-reduces started, all steps
  int64_t bytes_reduced = 0;  // f32 bytes all-reduced, all steps
  double wait_seconds = 0;    // time finish() spent waiting for reductions, all steps
  double copy_seconds = 0;    // time spent copying gradients in and out of buckets
  int64_t steps = 0;          // finish() calls that reduced
};

class GradientSync {
 public:
  /// `params` must outlive this object; its gradients must be f32 and contiguous. Gradients on a
  /// CUDA device are staged through the host buckets (copied out as they are marked, back after
  /// the reduction): MPI on host memory, for ranks that share a GPU or lack NCCL. Each copy out is
  /// a blocking cudaMemcpy that waits for the backward queued before it, so on CUDA the
  /// reduction does not overlap the backward yet (an async copy into pinned buckets with an
  /// event per bucket would; not done: it needs a GPU to measure).
  GradientSync(Communicator& comm, std::vector<Param>& params, const GradientSyncOptions& options = {});
  /// Waits for the reductions still in flight: the communication thread reads and writes the
  /// buckets until they complete (an exception during the backward unwinds through here).
  ~GradientSync();
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  int64_t num_buckets() const { return int64_t(buckets_.size()); }
  /// Parameter indices of bucket b, in the order they sit in its flat buffer (descending).
  const std::vector<int64_t>& bucket_params(int64_t b) const;
  int64_t bucket_of(int64_t param_index) const;
  int64_t bucket_elements(int64_t b) const;

  /// The gradient of params[param_index] is final for this step.
  void mark_ready(int64_t param_index);
  /// Waits for every bucket (starting those not started) and writes averaged gradients back.
  void finish();
  /// mark_ready for every parameter (in reverse order), then finish().
  void reduce_all();

  const GradientSyncStats& stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<int64_t> params;   // indices into params_, descending
    std::vector<int64_t> offsets;  // element offset of each param in `flat`
    std::vector<float> flat;       // the bucket's gradients, concatenated
    int64_t ready = 0;             // params copied in this step
    bool started = false;
    Request request;
  };
  void copy_in(int64_t param_index);
  void start_ready_buckets();

  Communicator& comm_;
  std::vector<Param>& params_;
  GradientSyncOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_, slot_of_;  // per param: bucket, position in the bucket
  std::vector<char> marked_;                  // per param, this step
  int64_t next_to_start_ = 0;                 // buckets start in order
  std::vector<std::string> labels_;           // "gradient bucket b of n" (kept alive for messages)
  GradientSyncStats stats_;
};

/// Sums scalar statistics over ranks in one f64 all-reduce, in place: loss sums, counts (exact
/// up to 2^53).
///   dist::allreduce_scalars(comm, {&s.mlm_loss_sum, &s.nsp_loss_sum}, {&s.mlm_count, &s.sequences});
void allreduce_scalars(Communicator& comm, std::initializer_list<double*> sums,
                       std::initializer_list<int64_t*> counts = {});

}  // namespace unmask::dist
