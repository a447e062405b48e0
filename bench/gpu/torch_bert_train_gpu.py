#!/usr/bin/env python3
"""PyTorch peer for `unmask bench train --device cuda`: HF transformers BertForPreTraining
(random weights, BERT-base or --model large: 24 x 1024, 16 heads, the issue's phase-1 benchmark),
MLM + NSP with labels on 20 (seq 128) / 80 (seq 512) masked positions per sequence (HF computes
the MLM logits for every position, ignore_index -100), dropout 0.1, torch.optim.AdamW, fp32, TF32
or bf16 (torch.autocast, fp32 master weights), eager. A step = zero_grad + forward + backward +
optimizer step; prints one JSON row per (seq, batch, precision) with the median of --steps.

  python3 bench/gpu/torch_bert_train_gpu.py --seq 128 --batch 32 --precision fp32,tf32
  python3 bench/gpu/torch_bert_train_gpu.py --model large --seq 128 --batch 64 --precision bf16
"""
import argparse, json, statistics, time
import torch
from transformers import BertConfig, BertForPreTraining

ap = argparse.ArgumentParser()
ap.add_argument("--seq", default="128")
ap.add_argument("--batch", default="32")
ap.add_argument("--precision", default="fp32,tf32")  # any of fp32, tf32, bf16
ap.add_argument("--model", default="base", choices=["base", "large"])
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--warmup", type=int, default=2)
a = ap.parse_args()
dev = torch.device("cuda")
torch.manual_seed(0)
cfg = BertConfig()  # bert-base-uncased sizes
if a.model == "large":
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
model = BertForPreTraining(cfg).to(dev).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
for prec in a.precision.split(","):
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    for seq, batch in zip([int(s) for s in a.seq.split(",")], [int(b) for b in a.batch.split(",")]):
        masked = 20 if seq <= 128 else 80
        ids = torch.randint(1000, cfg.vocab_size, (batch, seq), device=dev)
        labels = torch.full((batch, seq), -100, device=dev)
        for b in range(batch):
            pos = torch.randperm(seq - 1, device=dev)[:masked] + 1
            labels[b, pos] = ids[b, pos]
        nsp = torch.randint(0, 2, (batch,), device=dev)
        tt = torch.zeros_like(ids); tt[:, seq // 2:] = 1
        times = []
        for i in range(a.warmup + a.steps):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
                out = model(input_ids=ids, token_type_ids=tt, labels=labels, next_sentence_label=nsp)
            out.loss.backward()
            opt.step()
            torch.cuda.synchronize(); dt = time.perf_counter() - t0
            if i >= a.warmup: times.append(dt)
        med = statistics.median(times)
        print(json.dumps({"engine": "pytorch", "model": a.model, "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name(),
                          "seq": seq, "batch": batch, "precision": prec, "seq_per_s": batch / med,
                          "step_ms": med * 1e3, "loss": float(out.loss),
                          "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20}), flush=True)
        torch.cuda.reset_peak_memory_stats()
