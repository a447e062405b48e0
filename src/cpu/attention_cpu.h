// cpu/attention_cpu.h: fused multi-head attention forward on the CPU (fp32).
//
// The kernel behind ops::attention for Device::cpu. It never materialises the B x NH x T x T
// scores: each work item (sequence, head, block of up to kBlockQ queries) walks the keys of
// its sequence in blocks of up to kBlockK with an online softmax (running max and sum per
// query, flash-attention style), in a per-thread scratch buffer whose size depends on HS and
// the ISA only, never on T. Work items are spread over ctx.parallel_for.
//
// Three kernel sets are compiled into attention_cpu.cc (GCC function multiversioning via
// __attribute__((target))): generic (plain C++), avx2 (+fma) and avx512 (f/bw/vl/dq). The
// default is the best one __builtin_cpu_supports reports, overridden by the environment
// variable UNMASK_CPU_ISA=generic|avx2|avx512 (read once).
//
// Trusts its inputs: ops::attention (src/ops/attention.cc) validates them.
//
//   cpu::AttentionParams p{.q = q, .k = k, .v = v, .out = out, .ldq = 3 * C, ...};
//   cpu::attention_forward(ctx, p);                          // default ISA
//   cpu::attention_forward(ctx, p, cpu::AttentionIsa::avx2); // forced (tests, benches)
#pragma once
#include <cstddef>
#include <cstdint>

#include "unmask/context.h"

namespace unmask::cpu {

/// The kernel sets compiled into attention_cpu.cc.
enum class AttentionIsa : uint8_t { generic, avx2, avx512 };

/// "generic", "avx2", "avx512".
const char* attention_isa_name(AttentionIsa isa);
/// Whether this CPU can run `isa` (generic: always).
bool attention_isa_supported(AttentionIsa isa);
/// The best supported ISA, or the one UNMASK_CPU_ISA names (throws Error on an unknown
/// name; falls back to the best supported one below it when the CPU lacks it).
AttentionIsa attention_isa_default();

/// Raw-pointer description of one attention call. Rows are tokens; head h of a row is the
/// HS floats at column h*HS. Sequences are either packed (cu_seqlens) or padded (seq_len).
struct AttentionParams {
  const float* q = nullptr;       // [N, NH*HS], row stride ldq
  const float* k = nullptr;       // [N, NH*HS], row stride ldk
  const float* v = nullptr;       // [N, NH*HS], row stride ldv
  float* out = nullptr;           // [N, NH*HS], row stride ldo; must not overlap q, k, v
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  int64_t num_heads = 0;          // NH
  int64_t head_size = 0;          // HS
  float scale = 0.0f;             // multiplies q.k
  int64_t batch = 0;              // B
  const int32_t* cu_seqlens = nullptr;  // packed: [B+1], monotone, cu[0] = 0, cu[B] = N
  int64_t seq_len = 0;                  // padded: T (N = B*T); used when cu_seqlens is null
  const uint8_t* key_mask = nullptr;    // padded, optional: [B, T] contiguous, 1 = real key
};

/// What a call used; lets tests assert that memory stays bounded as T grows.
struct AttentionStats {
  size_t scratch_bytes_per_thread = 0;  // depends on HS and the ISA only
  int64_t work_items = 0;               // (sequence, head, query block) triples
  int threads = 0;                      // threads that ran work items
  AttentionIsa isa = AttentionIsa::generic;
};

/// out = softmax(scale * q k^T, over the real keys of each sequence) v, per sequence and
/// head. A query whose sequence has no real key gets zeros. An unsupported `isa` falls back
/// to generic.
AttentionStats attention_forward(Context& ctx, const AttentionParams& p, AttentionIsa isa);
AttentionStats attention_forward(Context& ctx, const AttentionParams& p);

/// Per-thread scratch bytes attention_forward uses for head size HS under `isa`.
size_t attention_scratch_bytes(int64_t head_size, AttentionIsa isa);

}  // namespace unmask::cpu
