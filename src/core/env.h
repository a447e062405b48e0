// core/env.h: the UNMASK_* environment settings (A/B switches, tuning and test hooks), read
// strictly. A value the setting does not take is an Error naming the variable and what it takes:
// `UNMASK_CUDA_GEMM_AUTOTUNE=true` must not quietly mean "off" in a benchmark that reports the
// opt-in's effect.
#pragma once
#include <initializer_list>
#include <optional>

namespace unmask {

/// A 0/1 switch: unset -> nullopt, "0" -> false, "1" -> true, anything else an Error that names
/// `name` and, when given, says what 1 and 0 do (`what`, e.g. "1 runs the fused kernel, 0 the
/// two passes").
std::optional<bool> env_switch_opt(const char* name, const char* what = nullptr);

/// env_switch_opt with `fallback` for an unset variable.
bool env_switch(const char* name, bool fallback, const char* what = nullptr);

/// An integer setting that takes one of `allowed` (written in decimal); unset -> fallback;
/// anything else an Error listing the values (and saying what they mean, `what`, when given).
int env_choice(const char* name, std::initializer_list<int> allowed, int fallback, const char* what = nullptr);

}  // namespace unmask
