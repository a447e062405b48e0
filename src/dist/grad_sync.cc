// dist/grad_sync.cc: gradient buckets, started in order as backward completes them.
#include "dist/grad_sync.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "unmask/error.h"

namespace unmask::dist {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

GradientSync::GradientSync(Communicator& comm, std::vector<Param>& params, const GradientSyncOptions& options)
    : comm_(comm), params_(params), options_(options) {
  if (!(options.bucket_mb > 0) || !std::isfinite(options.bucket_mb))
    throw Error("GradientSync: bucket_mb must be positive, got ", options.bucket_mb);
  const int64_t n = int64_t(params.size());
  const int64_t cap_elems = std::max<int64_t>(1, int64_t(options.bucket_mb * 1024 * 1024 / sizeof(float)));
  bucket_of_.assign(static_cast<size_t>(n), -1);
  slot_of_.assign(static_cast<size_t>(n), -1);
  marked_.assign(static_cast<size_t>(n), 0);
  int64_t filled = 0;
  for (int64_t i = n - 1; i >= 0; --i) {  // backward's order
    const Param& p = params[size_t(i)];
    if (!p.grad.defined() || p.grad.dtype() != DType::f32 || !p.grad.is_contiguous() ||
        p.grad.numel() != p.value.numel())
      throw Error("GradientSync: the gradient of ", p.name,
                  " must be an f32 contiguous tensor shaped like the value, got ",
                  p.grad.defined() ? p.grad.describe() : std::string("none"));
    const int64_t numel = p.grad.numel();
    if (buckets_.empty() || (filled > 0 && filled + numel > cap_elems)) {
      buckets_.emplace_back();
      filled = 0;
    }
    Bucket& b = buckets_.back();
    bucket_of_[size_t(i)] = int64_t(buckets_.size()) - 1;
    slot_of_[size_t(i)] = int64_t(b.params.size());
    b.params.push_back(i);
    b.offsets.push_back(filled);
    filled += numel;
  }
  const int64_t nb = int64_t(buckets_.size());
  for (int64_t b = 0; b < nb; ++b) {
    Bucket& bucket = buckets_[size_t(b)];
    const Param& last = params_[size_t(bucket.params.back())];
    bucket.flat.assign(static_cast<size_t>(bucket.offsets.back() + last.grad.numel()), 0.0f);
    labels_.push_back("gradient bucket " + std::to_string(b) + " of " + std::to_string(nb));
  }
  stats_.buckets = nb;
}

const std::vector<int64_t>& GradientSync::bucket_params(int64_t b) const {
  if (b < 0 || b >= num_buckets()) throw Error("GradientSync: bucket ", b, " out of [0, ", num_buckets(), ")");
  return buckets_[size_t(b)].params;
}

int64_t GradientSync::bucket_of(int64_t param_index) const {
  if (param_index < 0 || param_index >= int64_t(params_.size()))
    throw Error("GradientSync: parameter index ", param_index, " out of [0, ", params_.size(), ")");
  return bucket_of_[size_t(param_index)];
}

int64_t GradientSync::bucket_elements(int64_t b) const {
  bucket_params(b);  // range check
  return int64_t(buckets_[size_t(b)].flat.size());
}

void GradientSync::copy_in(int64_t i) {
  Bucket& b = buckets_[size_t(bucket_of_[size_t(i)])];
  const Tensor& g = params_[size_t(i)].grad;
  const auto t0 = Clock::now();
  float* dst = b.flat.data() + b.offsets[size_t(slot_of_[size_t(i)])];
  if (g.device() == Device::cpu) std::memcpy(dst, g.data<float>(), g.nbytes());
  else Tensor::from_blob(dst, g.shape(), DType::f32).copy_from(g);  // device -> host staging (waits for the backward)
  stats_.copy_seconds += seconds_since(t0);
  marked_[size_t(i)] = 1;
  ++b.ready;
}

GradientSync::~GradientSync() {
  for (Bucket& b : buckets_) {
    if (!b.started) continue;
    try {
      b.request.wait();  // a lost peer aborts the job from the communication thread
    } catch (...) {      // the reduction failed: the buffer is no longer in use either way
    }
  }
}

void GradientSync::start_ready_buckets() {
  while (next_to_start_ < num_buckets()) {
    Bucket& b = buckets_[size_t(next_to_start_)];
    if (b.ready != int64_t(b.params.size())) break;
    b.request = comm_.iallreduce_sum(b.flat.data(), int64_t(b.flat.size()), labels_[size_t(next_to_start_)].c_str());
    b.started = true;
    stats_.reductions += 1;
    stats_.bytes_reduced += int64_t(b.flat.size() * sizeof(float));
    ++next_to_start_;
  }
}

void GradientSync::mark_ready(int64_t param_index) {
  bucket_of(param_index);  // range check
  if (marked_[size_t(param_index)])
    throw Error("GradientSync: ", params_[size_t(param_index)].name, " marked ready twice in one step",
                Hint("call finish() once per optimizer step, after the last micro-batch's backward"));
  if (comm_.size() == 1) {
    marked_[size_t(param_index)] = 1;
    return;
  }
  copy_in(param_index);
  start_ready_buckets();
}

void GradientSync::finish() {
  if (comm_.size() == 1) {
    std::fill(marked_.begin(), marked_.end(), 0);
    return;
  }
  for (int64_t b = next_to_start_; b < num_buckets(); ++b)
    for (int64_t i : buckets_[size_t(b)].params)
      if (!marked_[size_t(i)]) copy_in(i);
  start_ready_buckets();
  const float scale_div = options_.average ? float(comm_.size()) : 1.0f;
  for (Bucket& b : buckets_) {
    const auto t0 = Clock::now();
    b.request.wait();
    stats_.wait_seconds += seconds_since(t0);
    const auto t1 = Clock::now();
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor& g = params_[size_t(b.params[k])].grad;
      float* src = b.flat.data() + b.offsets[k];
      const int64_t n = g.numel();
      // A division, not a multiplication by 1/size: (sum / 3) is what a reference computes.
      if (g.device() == Device::cpu) {
        float* dst = g.data<float>();
        for (int64_t j = 0; j < n; ++j) dst[j] = src[j] / scale_div;
      } else {  // host staging: the reduced values go back to the device
        if (options_.average)
          for (int64_t j = 0; j < n; ++j) src[j] /= scale_div;
        g.copy_from(Tensor::from_blob(src, g.shape(), DType::f32));
      }
    }
    stats_.copy_seconds += seconds_since(t1);
    b.ready = 0;
    b.started = false;
    b.request = Request();
  }
  std::fill(marked_.begin(), marked_.end(), 0);
  next_to_start_ = 0;
  stats_.steps += 1;
}

void GradientSync::reduce_all() {
  for (int64_t i = int64_t(params_.size()) - 1; i >= 0; --i)
    if (!marked_[size_t(i)]) mark_ready(i);
  finish();
}

void allreduce_scalars(Communicator& comm, std::initializer_list<double*> sums,
                       std::initializer_list<int64_t*> counts) {
  if (comm.size() == 1) return;
  std::vector<double> packed;
  packed.reserve(sums.size() + counts.size());
  for (double* s : sums) packed.push_back(*s);
  for (int64_t* c : counts) packed.push_back(double(*c));
  comm.allreduce_sum(packed.data(), int64_t(packed.size()), "scalar statistics");
  size_t k = 0;
  for (double* s : sums) *s = packed[k++];
  for (int64_t* c : counts) *c = int64_t(std::llround(packed[k++]));
}

}  // namespace unmask::dist
