#!/usr/bin/env python3
"""Prints the op profile of `unmask bench ... --profile N --format json` rows as a markdown table:
op | calls/step | ms/step | % of step (| host ms/step | gap before, ms/step where the build reports
them), and what no op accounts for (host work, copies, launch gaps). Lines that are not JSON, or rows without a profile, are skipped.
With --profile-shapes the GEMM rows carry their shapes, and their TFLOP/s are printed.

  python3 bench/gpu/profile_table.py ROWS.jsonl
"""
import json
import re
import sys

# "gemm MxNxK[xB] ..." (--profile-shapes): the GEMM's FLOPs, 2 M N K (B), for TFLOP/s
SHAPE = re.compile(r"^gemm (\d+)x(\d+)x(\d+)(?:x(\d+))? ")


def gemm_tflops(o):
    m = SHAPE.match(o["op"])
    if not m or o["ms_per_step"] <= 0:
        return ""
    M, N, K = (int(m.group(i)) for i in (1, 2, 3))
    B = int(m.group(4)) if m.group(4) else 1
    rate = 2.0 * M * N * K * B * o["calls_per_step"] / (o["ms_per_step"] * 1e-3)  # FLOP/s
    return f" ({rate / 1e12:.0f} TFLOP/s)" if rate >= 1e13 else f" ({rate / 1e9:.1f} GFLOP/s)"


def main(path):
    printed = 0
    for line in open(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        p = row.get("profile")
        if not p or not p.get("steps"):
            continue
        what = ", ".join(f"{k} {row[k]}" for k in ("model", "batch", "seq", "precision", "dtype", "activations",
                                                     "optimizer") if k in row)
        step = p["step_ms"]
        print(f"\nprofile ({what}): {p['steps']} step(s), {step:.2f} ms a step with every op timed\n")
        # host ms and gap before: columns of builds from 2026-11-27 on (OpTime in context.h)
        extra = "host_ms_per_step" in (p["ops"][0] if p["ops"] else {})
        print("| op | calls/step | ms/step | % of step |"
              + (" host ms/step | gap before, ms/step | most of it after |" if extra else "")
              + "\n|---|---:|---:|---:|" + ("---:|---:|---|" if extra else ""))
        gaps = 0.0
        for o in p["ops"]:
            after = o.get("gap_mostly_after", "")
            if after:
                after += f" ({o.get('gap_mostly_after_ms_per_step', 0.0):.3f})"
            cols = (f" {o['host_ms_per_step']:.3f} | {o['gap_before_ms_per_step']:.3f} | {after} |" if extra else "")
            gaps += o.get("gap_before_ms_per_step", 0.0)
            print(f"| {o['op']}{gemm_tflops(o)} | {o['calls_per_step']:.1f} | {o['ms_per_step']:.3f} | "
                  f"{100 * o['ms_per_step'] / step if step else 0:.1f}% |" + cols)
        other = p.get("other_ms_per_step", 0.0)
        print(f"| (not in an op) | | {other:.3f} | {100 * other / step if step else 0:.1f}% |"
              + (f" | {gaps:.3f} | |" if extra else ""))
        printed += 1
    return 0 if printed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
