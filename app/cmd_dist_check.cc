// app/cmd_dist_check.cc: `unmask dist-check`, a launch check for data-parallel runs.
//
//   mpirun -np 2 build/unmask dist-check                 # every rank: rank, host, sums ok?
//   mpirun -np 2 build/unmask dist-check --bench 4,25,110 --overlap-mb 110
//
// Every rank all-reduces a known pattern (rank r contributes (r + 1) * (i % 13 + 1) at element i,
// so the sum is size (size + 1) / 2 * (i % 13 + 1), exact in f32), broadcasts a string from rank
// 0 and allgathers its rank; rank 0 prints one line per rank. --bench times allreduce_sum of f32
// buffers (algorithm and bus bandwidth, the nccl-tests convention: busbw = algbw * 2 (P-1) / P);
// --overlap-mb times a synthetic backward with GradientSync, reduced after it or overlapped with it.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli.h"
#include "dist/grad_sync.h"
#include "unmask/dist.h"
#include "unmask/error.h"

namespace unmask::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The largest value over ranks (a time is as slow as its slowest rank).
double max_over_ranks(Communicator& comm, double v) {
  const std::vector<double> all = comm.allgather({v});
  return *std::max_element(all.begin(), all.end());
}

/// Mean seconds of one allreduce_sum of n f32 (after 2 warm-up calls), slowest rank.
double time_allreduce(Communicator& comm, int64_t n, int iters) {
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  for (int i = 0; i < 2; ++i) comm.allreduce_sum(buf.data(), n, "bench warm-up");
  comm.barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) comm.allreduce_sum(buf.data(), n, "bench");
  return max_over_ranks(comm, seconds_since(t0) / iters);
}

/// Work standing in for the backward of one parameter: `reps` passes of a multiply-add over a
/// 64 KiB buffer (compute-bound, stays in L2).
float fake_backward(std::vector<float>& work, int64_t reps) {
  float acc = 0;
  for (int64_t r = 0; r < reps; ++r) {
    for (float& w : work) w = w * 0.999f + 0.001f;
    acc += work[size_t(r) % work.size()];
  }
  return acc;
}

void overlap_bench(Communicator& comm, double mb, int iters) {
  // 1 MiB parameters (BERT-base's layers are 0.01-9 MiB), so buckets fill during the backward.
  const int64_t per_param = 256 * 1024, nparams = std::max<int64_t>(1, int64_t(mb));
  std::vector<Param> params(static_cast<size_t>(nparams));
  for (int64_t i = 0; i < nparams; ++i) {
    params[size_t(i)].name = "p" + std::to_string(i);
    params[size_t(i)].value = Tensor::zeros({per_param}, DType::f32);
    params[size_t(i)].grad = Tensor::zeros({per_param}, DType::f32);
  }
  dist::GradientSync sync(comm, params);
  // Calibrate the fake backward to take about as long as reducing all gradients: the case where
  // overlap can hide the most.
  const double reduce_s = time_allreduce(comm, nparams * per_param, 2);
  std::vector<float> work(16384, 1.0f);
  float sink = 0;
  int64_t reps = 16;
  for (int round = 0; round < 3; ++round) {  // rescale reps until the backward takes ~reduce_s
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < nparams; ++i) sink += fake_backward(work, reps);
    const double took = max_over_ranks(comm, seconds_since(t0));
    reps = std::max<int64_t>(1, int64_t(double(reps) * reduce_s / std::max(took, 1e-9)));
  }
  sync.reduce_all();  // warm-up: the buckets' first reductions touch fresh scratch memory
  Clock::time_point t0;
  double serial = 0, overlapped = 0, compute = 0;
  for (int it = 0; it < iters; ++it) {
    comm.barrier();
    t0 = Clock::now();
    for (int64_t i = nparams - 1; i >= 0; --i) sink += fake_backward(work, reps);
    compute += seconds_since(t0);
    sync.reduce_all();
    serial += seconds_since(t0);
    comm.barrier();
    t0 = Clock::now();
    for (int64_t i = nparams - 1; i >= 0; --i) {
      sink += fake_backward(work, reps);
      sync.mark_ready(i);
    }
    sync.finish();
    overlapped += seconds_since(t0);
  }
  serial = max_over_ranks(comm, serial / iters);
  overlapped = max_over_ranks(comm, overlapped / iters);
  compute = max_over_ranks(comm, compute / iters);
  // The best overlap can do is max(backward, reduce); report how much of min(backward, reduce) it hid.
  const double reduce = serial - compute, ideal = std::max(compute, reduce);
  if (comm.is_root())
    std::printf(
        "overlap: %lld params x 1 MiB in %lld buckets: backward alone %.3f s, backward then reduce %.3f s, "
        "overlapped %.3f s (ideal %.3f s: %.0f%% of the hideable time hidden)%s\n",
        (long long)nparams, (long long)sync.num_buckets(), compute, serial, overlapped, ideal,
        100.0 * (serial - overlapped) / std::max(serial - ideal, 1e-9), sink == 12345.f ? " " : "");
}

}  // namespace

int cmd_dist_check(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"elements", "N", "f32 elements in the check all-reduce", "1048576"},
      {"bench", "MB,MB", "also time allreduce_sum of buffers of these sizes in MiB (e.g. 4,25,110)", ""},
      {"overlap-mb", "MB", "also time a synthetic backward + GradientSync of this many MiB, after vs overlapped", ""},
      {"iters", "N", "timed repetitions per benchmark", "10"},
  };
  auto args = Args::parse("dist-check",
                          "Checks a data-parallel launch (mpirun -np N / srun -n N): every rank all-reduces a "
                          "known pattern, broadcasts and gathers, and rank 0 prints what each rank got.",
                          specs, argc, argv, 2);
  if (!args) return 0;
  const int64_t n = args->get_int("elements");
  const int iters = int(args->get_int("iters"));
  if (n < 1 || iters < 1) throw Error("dist-check: --elements and --iters must be >= 1");

  Communicator& comm = Communicator::world();
  const int rank = comm.rank(), size = comm.size();

  std::vector<float> data(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[size_t(i)] = float(rank + 1) * float(i % 13 + 1);
  auto t0 = Clock::now();
  comm.allreduce_sum(data.data(), n, "dist-check pattern");
  const double allreduce_s = seconds_since(t0);
  int64_t bad = 0, first_bad = -1;
  const double tri = double(size) * (size + 1) / 2;
  for (int64_t i = 0; i < n; ++i)
    if (double(data[size_t(i)]) != tri * double(i % 13 + 1) && bad++ == 0) first_bad = i;

  char message[64] = {0};
  if (comm.is_root()) std::snprintf(message, sizeof(message), "unmask dist-check from rank 0");
  comm.broadcast(message, sizeof(message), 0, "dist-check string");
  const bool bcast_ok = std::strcmp(message, "unmask dist-check from rank 0") == 0;
  const std::vector<int32_t> ranks = comm.allgather_pod<int32_t>(rank, "dist-check ranks");
  bool gather_ok = true;
  for (int r = 0; r < size; ++r) gather_ok = gather_ok && ranks[size_t(r)] == r;

  char line[256];
  if (bad == 0)
    std::snprintf(line, sizeof(line),
                  "rank %d of %d (local %d of %d) on %s: allreduce of %lld f32 ok (%.1f ms), "
                  "broadcast %s, allgather %s",
                  rank, size, comm.local_rank(), comm.local_size(), comm.host_of(rank).c_str(), (long long)n,
                  allreduce_s * 1e3, bcast_ok ? "ok" : "WRONG", gather_ok ? "ok" : "WRONG");
  else
    std::snprintf(line, sizeof(line),
                  "rank %d of %d on %s: allreduce WRONG at %lld of %lld elements (first: element "
                  "%lld = %g, expected %g)",
                  rank, size, comm.host_of(rank).c_str(), (long long)bad, (long long)n, (long long)first_bad,
                  double(data[size_t(first_bad)]), tri * double(first_bad % 13 + 1));
  std::vector<char> lines(sizeof(line) * size_t(size));
  comm.allgather_bytes(line, sizeof(line), lines.data(), "dist-check report");
  double failures = (bad == 0 && bcast_ok && gather_ok) ? 0 : 1;
  comm.allreduce_sum(&failures, 1, "dist-check verdict");
  if (comm.is_root()) {
    std::printf("dist-check: %d rank(s), backend %s, timeout %.0f s\n", size, comm.backend_name(), comm.timeout_s());
    for (int r = 0; r < size; ++r) std::printf("  %s\n", lines.data() + size_t(r) * sizeof(line));
  }

  if (args->has("bench")) {
    const double lat = time_allreduce(comm, 1, std::max(iters, 100));
    if (comm.is_root()) std::printf("latency: allreduce_sum of 1 f32 %.1f us\n", lat * 1e6);
    for (int64_t mb : args->get_int_list("bench")) {
      if (mb < 1) throw Error("dist-check: --bench sizes must be >= 1 MiB, got ", mb);
      const int64_t count = mb * 1024 * 1024 / 4;
      const double s = time_allreduce(comm, count, iters);
      const double algbw = double(count) * 4 / s / 1e9;
      if (comm.is_root())
        std::printf("bench: allreduce_sum %4lld MiB f32 x %d ranks: %8.2f ms, algbw %6.2f GB/s, busbw %6.2f GB/s\n",
                    (long long)mb, size, s * 1e3, algbw, algbw * 2.0 * (size - 1) / size);
    }
  }
  if (args->has("overlap-mb")) overlap_bench(comm, args->get_double("overlap-mb"), iters);
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

}  // namespace unmask::cli
