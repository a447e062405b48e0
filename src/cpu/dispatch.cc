// cpu/dispatch.cc: picks the CPU kernel table once, from CPUID or UNMASK_CPU_ISA.
//
// Three copies of the kernels exist (kernels_generic.cc, kernels_avx2.cc, kernels_avx512.cc;
// PyTorch DispatchStub / CTranslate2 style). The first call to kernels() chooses the best one
// the CPU runs, unless UNMASK_CPU_ISA names one; naming an ISA the CPU lacks is an error rather
// than a silent fallback, so a CI job that asks for avx512 really tests avx512.
#include <atomic>
#include <cstdlib>
#include <string>

#include "cpu/kernels.h"
#include "unmask/error.h"

namespace unmask::cpu {
namespace generic { const CpuKernels& table(); }
namespace avx2 { const CpuKernels& table(); }
namespace avx512 { const CpuKernels& table(); }

namespace {

bool cpu_has(std::string_view isa) {
  if (isa == "generic") return true;
  if (isa == "avx2") return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (isa == "avx512")
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return false;
}

const CpuKernels& choose() {
  const char* env = std::getenv("UNMASK_CPU_ISA");
  if (env && *env) return kernels_for(env);
  auto isas = available_isas();
  return kernels_for(isas.back());
}

std::atomic<const CpuKernels*> g_override{nullptr};

}  // namespace

const CpuKernels& kernels_for(std::string_view isa) {
  if (isa != "generic" && isa != "avx2" && isa != "avx512")
    throw Error("unknown CPU ISA '", isa, "'; expected generic, avx2 or avx512",
                Hint("check UNMASK_CPU_ISA"));
  if (!cpu_has(isa))
    throw Unsupported("CPU ISA ", isa, " requested but this CPU does not support it",
                      Hint("unset UNMASK_CPU_ISA or choose generic"));
  if (isa == "avx512") return avx512::table();
  if (isa == "avx2") return avx2::table();
  return generic::table();
}

std::vector<std::string_view> available_isas() {
  std::vector<std::string_view> out;
  for (std::string_view isa : {"generic", "avx2", "avx512"})
    if (cpu_has(isa)) out.push_back(isa);
  return out;
}

const CpuKernels& kernels() {
  if (const CpuKernels* o = g_override.load(std::memory_order_acquire)) return *o;
  static const CpuKernels& chosen = choose();
  return chosen;
}

void kernels_override_for_testing(std::string_view isa) {
  g_override.store(isa.empty() ? nullptr : &kernels_for(isa), std::memory_order_release);
}

}  // namespace unmask::cpu
