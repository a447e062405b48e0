#!/usr/bin/env python3
"""Merges the JSON rows of unmask_gpu_bench (or `unmask bench infer --format json`) and
torch_bert_infer.py into one table:
one line per (batch, seq) with each implementation's latency and TFLOP/s, and unmask's
speed-up over the best PyTorch row of the same shape.

  python3 bench/gpu/summarize.py unmask.jsonl torch.jsonl
"""
import json
import sys


def main(paths):
    rows = {}
    impls = []
    for p in paths:
        try:
            lines = open(p).read().splitlines()
        except OSError as e:
            print(f"(missing {p}: {e})")
            continue
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "impl" not in r and r.get("engine") == "unmask":  # `unmask bench infer --format json`
                r["impl"] = "unmask"
                r["tflops"] = r.get("gflop_per_s", 0.0) / 1e3
            if r.get("impl") not in impls:
                impls.append(r.get("impl"))
            rows.setdefault((r["batch"], r["seq"]), {})[r["impl"]] = r
    if not rows:
        print("no benchmark rows")
        return 0
    head = f"{'batch':>6} {'seq':>6} " + " ".join(f"{i + ' ms':>22} {'TF/s':>7}" for i in impls) + f" {'speedup':>8}"
    print(head)
    for (b, t) in sorted(rows, key=lambda k: (k[1], k[0])):
        r = rows[(b, t)]
        cells = []
        for i in impls:
            x = r.get(i)
            if x is None:
                cells.append(f"{'-':>22} {'-':>7}")
            elif "error" in x:
                cells.append(f"{x['error'][:22]:>22} {'-':>7}")
            else:
                cells.append(f"{x['latency_ms']:>22.3f} {x['tflops']:>7.1f}")
        torch_best = [x["latency_ms"] for k, x in r.items() if k.startswith("torch") and "latency_ms" in x]
        ours = r.get("unmask", {}).get("latency_ms")
        sp = f"{min(torch_best) / ours:8.2f}x" if ours and torch_best else f"{'-':>8}"
        print(f"{b:6d} {t:6d} " + " ".join(cells) + " " + sp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
