// app/bench_profile.cc: see bench_profile.h.
#include "bench_profile.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "unmask/error.h"

namespace unmask::cli {

StepProfile profile_steps(Context& ctx, int64_t steps, bool by_shape, const std::function<void()>& step) {
  StepProfile p;
  p.steps = steps;
  if (steps <= 0) return p;
  ctx.synchronize();
  ctx.set_op_profiling(true, by_shape);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (int64_t i = 0; i < steps; ++i) step();
    ctx.synchronize();
  } catch (const Error& e) {
    ctx.set_op_profiling(false);
    std::fprintf(stderr, "unmask bench: --profile: a profiled step failed, no profile for this row: %s\n", e.what());
    return StepProfile{};
  } catch (...) {
    ctx.set_op_profiling(false);
    throw;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  p.ops = ctx.take_op_profile();
  ctx.set_op_profiling(false);
  p.step_ms = ms / double(steps);
  return p;
}

namespace {
std::string fmt_ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", ms);
  return buf;
}

double in_ops_ms(const StepProfile& p) {
  double sum = 0;
  for (const OpTime& t : p.ops) sum += t.ms;
  return sum / double(p.steps);
}
}  // namespace

void print_step_profile(const StepProfile& p) {
  if (p.steps <= 0) return;
  std::printf("\n  profile: %lld step(s) with every op timed, %.2f ms a step (timing adds a little to it)\n\n",
              (long long)p.steps, p.step_ms);
  // host ms: the host inside the op's front-ends; gap before: outside any op just before its
  // calls (OpTime::gap_before_ms), where the "not in an op" rest sits.
  std::printf("  | op | calls/step | ms/step | %% of step | host ms/step | gap before, ms/step | most of it after |\n"
              "  |---|---:|---:|---:|---:|---:|---|\n");
  const double n = double(p.steps);
  double gaps = 0;
  for (const OpTime& t : p.ops) {
    const std::string after =
        t.gap_mostly_after.empty() ? std::string() : t.gap_mostly_after + " (" + fmt_ms(t.gap_mostly_after_ms / n) + ")";
    std::printf("  | %s | %.1f | %.3f | %.1f%% | %.3f | %.3f | %s |\n", t.op.c_str(), double(t.calls) / n, t.ms / n,
                p.step_ms > 0 ? 100.0 * t.ms / n / p.step_ms : 0.0, t.host_ms / n, t.gap_before_ms / n, after.c_str());
    gaps += t.gap_before_ms / n;
  }
  const double other = p.step_ms - in_ops_ms(p);
  std::printf("  | (not in an op: host work, copies, launch gaps) | | %.3f | %.1f%% | | %.3f | |\n\n", other,
              p.step_ms > 0 ? 100.0 * other / p.step_ms : 0.0, gaps);
}

std::string step_profile_json(const StepProfile& p) {
  nlohmann::json j;
  j["steps"] = p.steps;
  j["step_ms"] = p.step_ms;
  j["ops"] = nlohmann::json::array();
  for (const OpTime& t : p.ops)
    j["ops"].push_back({{"op", t.op},
                        {"calls_per_step", double(t.calls) / double(std::max<int64_t>(p.steps, 1))},
                        {"ms_per_step", t.ms / double(std::max<int64_t>(p.steps, 1))},
                        {"host_ms_per_step", t.host_ms / double(std::max<int64_t>(p.steps, 1))},
                        {"gap_before_ms_per_step", t.gap_before_ms / double(std::max<int64_t>(p.steps, 1))},
                        {"gap_mostly_after", t.gap_mostly_after},
                        {"gap_mostly_after_ms_per_step", t.gap_mostly_after_ms / double(std::max<int64_t>(p.steps, 1))}});
  j["other_ms_per_step"] = p.steps > 0 ? p.step_ms - in_ops_ms(p) : 0.0;
  return j.dump();
}

}  // namespace unmask::cli
