// app/bench_profile.h: `bench train|videomae|infer --profile N`: N more steps after a row's
// timed ones, with every op front-end timed (Context::set_op_profiling), printed as the time per
// op and step beside the step's own time, so a GPU run says where a step goes (GEMMs, attention,
// row kernels, optimizer, and the rest: host work, copies and launch gaps).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "unmask/context.h"

namespace unmask::cli {

struct StepProfile {
  int64_t steps = 0;
  double step_ms = 0;        // wall clock per profiled step (synchronised), profiling overhead included
  std::vector<OpTime> ops;   // totals over the steps, most time first
};

/// Runs `step` `steps` times with op profiling on (synchronising around each), then turns it off.
/// by_shape (--profile-shapes): each GEMM shape and epilogue gets its own row.
/// A step that throws an unmask::Error (out of device memory) ends the profile, not the
/// benchmark: the error goes to stderr and an empty profile (steps = 0) comes back.
StepProfile profile_steps(Context& ctx, int64_t steps, bool by_shape, const std::function<void()>& step);

/// Markdown lines after a table row: op | calls/step | ms/step | % of step | host ms/step | gap
/// before, ms/step, and "(not in an op)" with the gaps' sum.
void print_step_profile(const StepProfile& p);

/// The profile as a JSON object: {"steps", "step_ms", "ops": [{"op", "calls_per_step",
/// "ms_per_step", "host_ms_per_step", "gap_before_ms_per_step"}], "other_ms_per_step"}.
std::string step_profile_json(const StepProfile& p);

}  // namespace unmask::cli
