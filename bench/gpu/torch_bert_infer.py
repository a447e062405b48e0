#!/usr/bin/env python3
"""PyTorch peer of unmask_gpu_bench: HF transformers BertModel (BERT-base, random weights) in
bf16 on one GPU, same shapes, same JSON rows.

Modes:
  eager    BertModel(attn_implementation="sdpa"), torch.inference_mode()
  compile  torch.compile(model, mode=--compile-mode) on the shapes of --compile-shapes only
           (each new shape recompiles; compiling all 45 shapes would not fit the time budget)

Timing as in the C++ bench: warm-up calls, then --iters calls each timed with a pair of CUDA
events; the median is reported. Full-length sequences, attention_mask=None, the pooler on. With
--ids host (default) each call uploads its ids from the host, as `unmask bench infer` does;
--ids device keeps them on the GPU (unmask_gpu_bench, run_device.sh). FLOPs are counted
with the same formula (GEMMs + QK^T + PV), so TFLOP/s columns compare directly.

  python3 bench/gpu/torch_bert_infer.py --json out.jsonl [--modes eager,compile]
"""
import argparse
import json
import statistics
import sys
import time

C, I, L = 768, 3072, 12


def flops(b, t, layers=L):
    n = b * t
    return layers * (2 * n * (3 * C * C + C * C + 2 * C * I) + 4.0 * b * t * t * C)


def parse_shapes(s):
    out = []
    for item in s.split(","):
        if item:
            b, t = item.lower().split("x")
            out.append((int(b), int(t)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    ap.add_argument("--seqs", default="64,128,384,1024,4096")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--compile-shapes", default="1x128,32x128,8x384,64x384")
    ap.add_argument("--compile-mode", default="reduce-overhead")  # CUDA graphs, like unmask_gpu_bench
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=262144)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--ids", default="host", choices=["host", "device"],
                    help="host: the ids are uploaded inside each timed call, as `unmask bench infer` does; "
                         "device: already on the GPU (unmask_gpu_bench's timing)")
    ap.add_argument("--act", default="gelu", choices=["gelu", "gelu_new"],
                    help="hidden_act: gelu (exact erf, HF default) or gelu_new (tanh approximation, AIT's fast_gelu)")
    a = ap.parse_args()
    t_start = time.time()

    import torch
    import transformers
    from transformers import BertConfig, BertModel

    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    print(f"device: {name}; torch {torch.__version__}, transformers {transformers.__version__}", flush=True)
    batches = [int(x) for x in a.batches.split(",") if x]
    seqs = [int(x) for x in a.seqs.split(",") if x]
    max_t = max(t for t in seqs for b in batches if b * t <= a.max_tokens)
    cfg = BertConfig(max_position_embeddings=max(512, max_t), hidden_act=a.act)  # BERT-base
    torch.manual_seed(0)
    # With the pooler, as `unmask bench infer` runs it (BertModel's outputs: hidden states + pooled).
    try:
        model = BertModel(cfg, add_pooling_layer=True, attn_implementation="sdpa")
    except TypeError:  # older/newer signatures: set it on the config
        cfg._attn_implementation = "sdpa"
        model = BertModel(cfg, add_pooling_layer=True)
    model = model.to(dev, torch.bfloat16).eval()
    print(f"attention implementation: {getattr(model.config, '_attn_implementation', '?')}", flush=True)
    out = open(a.json, "w") if a.json else None
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def bench(fn, ids):
        for _ in range(a.warmup):
            fn(ids)
        ts = []
        for _ in range(a.iters):
            start_ev.record()
            fn(ids)
            end_ev.record()
            end_ev.synchronize()
            ts.append(start_ev.elapsed_time(end_ev))
        return statistics.median(ts), min(ts)

    def emit(impl, b, t, med=None, mn=None, err=None):
        row = {"impl": impl, "device": name, "dtype": "bf16", "act": a.act, "batch": b, "seq": t}
        if err is None:
            tf = flops(b, t) / (med * 1e-3) / 1e12
            row.update(latency_ms=round(med, 4), latency_min_ms=round(mn, 4), qps=round(b / (med * 1e-3), 2),
                       tflops=round(tf, 2), pct_peak=round(100 * tf / a.peak_tflops, 2), iters=a.iters)
            print(f"{impl:>16} {b:6d} {t:6d} {med:12.3f} {b / (med * 1e-3):12.1f} {tf:10.1f} {100 * tf / a.peak_tflops:7.1f}%",
                  flush=True)
        else:
            row["error"] = err
            print(f"{impl:>16} {b:6d} {t:6d}  ERROR {err}", flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()

    print(f"\n{'impl':>16} {'batch':>6} {'seq':>6} {'latency_ms':>12} {'QPS':>12} {'TFLOP/s':>10} {'%peak':>8}")
    modes = [m for m in a.modes.split(",") if m]
    # --ids host: the ids start on the host and are uploaded inside the timed call, as unmask's
    # forward uploads them (its timing is the wall clock of forward() from host ids).
    ids_dev = dev if a.ids == "device" else "cpu"
    eager_fn = lambda ids: model(input_ids=ids.to(dev))
    cmodel = None

    def eager_row(b, t):
        ids = torch.randint(0, cfg.vocab_size, (b, t), device=ids_dev)
        try:
            med, mn = bench(eager_fn, ids)
            emit("torch-eager-sdpa", b, t, med, mn)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            emit("torch-eager-sdpa", b, t, err="OOM")
        except Exception as e:  # noqa: BLE001 - report and go on
            torch.cuda.empty_cache()
            emit("torch-eager-sdpa", b, t, err=f"{type(e).__name__}: {str(e)[:200]}")

    # Order: eager then compile on the --compile-shapes (the target rows: batch 1 and 256
    # at seq 128), then eager on the rest of the grid, so a cut budget loses the least useful rows.
    targets = [(b, t) for b, t in parse_shapes(a.compile_shapes) if b * t <= a.max_tokens]
    grid = [(b, t) for t in seqs for b in batches if b * t <= a.max_tokens and (b, t) not in targets]
    skipped = [(b, t) for t in seqs for b in batches if b * t > a.max_tokens]
    if skipped:
        print(f"over --max-tokens {a.max_tokens}, not run: {', '.join(f'{b}x{t}' for b, t in skipped)}", flush=True)
    with torch.inference_mode():
        for b, t in targets if "eager" in modes else []:
            eager_row(b, t)
        if "compile" in modes and targets:
            cmodel = torch.compile(model, mode=a.compile_mode, dynamic=False)
            fn = lambda ids: cmodel(input_ids=ids.to(dev))
            for b, t in targets:
                if time.time() - t_start > a.budget_s * 0.8:
                    print("compile: time budget spent", flush=True)
                    break
                ids = torch.randint(0, cfg.vocab_size, (b, t), device=ids_dev)
                try:
                    t0 = time.time()
                    fn(ids)  # compile
                    print(f"  compiled {b}x{t} in {time.time() - t0:.1f} s", flush=True)
                    med, mn = bench(fn, ids)
                    emit("torch-compile", b, t, med, mn)
                except Exception as e:  # noqa: BLE001 - report and go on
                    emit("torch-compile", b, t, err=f"{type(e).__name__}: {str(e)[:200]}")
        for b, t in grid if "eager" in modes else []:
            if time.time() - t_start > a.budget_s:
                print("eager: time budget spent", flush=True)
                break
            eager_row(b, t)
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
