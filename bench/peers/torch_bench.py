#!/usr/bin/python3
"""PyTorch eager CPU latency benchmark (the peer for unmask's `bench infer`).

  /usr/bin/python3 bench/peers/torch_bench.py --model /tmp/unmask-bench/bert-base --batch 1,8 --seq 128 --threads 2
  /usr/bin/python3 bench/peers/torch_bench.py --model ... --batch 32 --seq 128 --lengths uniform:16:128

Same model as the ONNX export (export_onnx.py): the HF-equivalent BERT from
tests/python/bert_reference.py (impl="hf", float32, encoder + pooler), run eagerly under
torch.inference_mode() with torch.set_num_threads(--threads).  Same inputs and measurement as
ort_bench.mjs (same seeded LCG for ids and lengths; warm-up, up to --iters timed runs, early stop
after --max-seconds once 3 are done; median).  One JSON row per setting:
  {"engine":"pytorch","batch":B,"seq":T,"latency_ms":..,"qps":..,"threads":N,...}
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_onnx import load_encoder  # noqa: E402


def lcg(seed):
    s = seed & 0xFFFFFFFF
    while True:
        s = (1664525 * s + 1013904223) & 0xFFFFFFFF
        yield s


def make_batch(B, seq, lengths, seed):
    """Same batch as makeBatch() in ort_bench.mjs."""
    nxt = lcg(seed)
    if lengths:
        m = re.fullmatch(r"uniform:(\d+):(\d+)", lengths)
        if not m:
            raise SystemExit(f"bad --lengths {lengths} (want uniform:LO:HI)")
        lo, hi = int(m.group(1)), int(m.group(2))
        lens = [lo + (next(nxt) * (hi - lo + 1)) // 2**32 for _ in range(B)]
    else:
        lens = [seq] * B
    T = max(lens)
    ids = np.zeros((B, T), np.int64)
    mask = np.zeros((B, T), np.int64)
    for b, n in enumerate(lens):
        for t in range(n):
            ids[b, t] = 101 if t == 0 else 102 if t == n - 1 else 1000 + next(nxt) % 29000
        mask[b, :n] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros(B, T, dtype=torch.int64), T, lens


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint dir (make_bert_checkpoint.py)")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--seq", default="128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-seconds", type=float, default=20.0)
    ap.add_argument("--lengths")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    model = load_encoder(a.model)
    for seq in [int(s) for s in a.seq.split(",")]:
        for B in [int(b) for b in a.batch.split(",")]:
            ids, mask, tt, T, lens = make_batch(B, seq, a.lengths, a.seed)
            times = []
            with torch.inference_mode():
                for _ in range(a.warmup):
                    model(ids, mask, tt)
                start = time.perf_counter()
                for _ in range(a.iters):
                    t0 = time.perf_counter()
                    model(ids, mask, tt)
                    times.append((time.perf_counter() - t0) * 1e3)
                    if len(times) >= 3 and time.perf_counter() - start > a.max_seconds:
                        break
            med = float(np.median(times))
            row = {"engine": "pytorch", "batch": B, "seq": T, "latency_ms": round(med, 3),
                   "qps": round(B / (med / 1e3), 3), "threads": a.threads, "iters": len(times),
                   "min_ms": round(min(times), 3)}
            if a.lengths:
                row["lengths"] = a.lengths
                row["tokens"] = int(sum(lens))
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
