#!/usr/bin/env python3
"""PyTorch peer for `unmask bench train --device cuda`: HF transformers BertForPreTraining
(random weights, BERT-base or --model large: 24 x 1024, 16 heads, the issue's phase-1 benchmark),
MLM + NSP with labels on 20 (seq 128) / 80 (seq 512) masked positions per sequence, dropout 0.1,
torch.optim.AdamW, fp32, TF32 or bf16 (torch.autocast, fp32 master weights), eager. A step =
zero_grad + --accumulate x (forward + backward of loss / accumulate) + optimizer step, as
`unmask bench train --accumulate` (DLE's phase 1: 128 micro-batches of 64 a step); prints one
JSON row per (seq, batch, precision, MLM head) with the median of --steps, sequences/s counting
every micro-batch.

--mlm-head (a comma list):
  masked  the MLM head (transform + tied decoder + cross-entropy) on the masked positions only,
          gathered with index_select (positions found before timing): the work unmask does, as
          NVIDIA's DLE BERT does it (the head-to-head row);
  all     HF's own BertForPreTraining forward with labels: the MLM logits of every position
          (ignore_index -100), about 9% more forward FLOPs for BERT-large at seq 128.
A row that fails (out of memory, an exception) is printed with "failed": true and the error, and
the next row runs.

  python3 bench/gpu/torch_bert_train_gpu.py --seq 128 --batch 32 --precision fp32,tf32
  python3 bench/gpu/torch_bert_train_gpu.py --model large --seq 128 --batch 64 --precision bf16
"""
import argparse, json, statistics, time
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForPreTraining

ap = argparse.ArgumentParser()
ap.add_argument("--seq", default="128")
ap.add_argument("--batch", default="32")
ap.add_argument("--precision", default="fp32,tf32")  # any of fp32, tf32, bf16
ap.add_argument("--model", default="base", choices=["base", "large"])
ap.add_argument("--mlm-head", default="masked,all")  # any of masked, all
ap.add_argument("--accumulate", type=int, default=1)  # micro-batches per optimizer step
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--warmup", type=int, default=2)
a = ap.parse_args()
if a.accumulate < 1:
    ap.error(f"--accumulate must be at least 1, got {a.accumulate}")
for h in a.mlm_head.split(","):
    if h not in ("masked", "all"):
        ap.error(f"--mlm-head: {h!r} is not masked or all")
dev = torch.device("cuda")
torch.manual_seed(0)
cfg = BertConfig()  # bert-base-uncased sizes
if a.model == "large":
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
model = BertForPreTraining(cfg).to(dev).train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)


def step_loss(head, ids, tt, labels, nsp, flat_pos, targets):
    if head == "all":
        return model(input_ids=ids, token_type_ids=tt, labels=labels, next_sentence_label=nsp).loss
    o = model.bert(input_ids=ids, token_type_ids=tt)
    hidden = o.last_hidden_state.reshape(-1, cfg.hidden_size).index_select(0, flat_pos)
    scores = model.cls.predictions(hidden)  # [masked rows, V]
    nsp_scores = model.cls.seq_relationship(o.pooler_output)
    return F.cross_entropy(scores.float(), targets) + F.cross_entropy(nsp_scores.float(), nsp)


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
        flat_pos = (labels.reshape(-1) != -100).nonzero().squeeze(1)
        targets = labels.reshape(-1).index_select(0, flat_pos)
        nsp = torch.randint(0, 2, (batch,), device=dev)
        tt = torch.zeros_like(ids); tt[:, seq // 2:] = 1
        for head in a.mlm_head.split(","):
            row = {"engine": "pytorch", "model": a.model, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(), "seq": seq, "batch": batch, "precision": prec,
                   "mlm_head": head, "optimizer": "adamw", "accumulation": a.accumulate}
            try:
                times = []
                for i in range(a.warmup + a.steps):
                    torch.cuda.synchronize(); t0 = time.perf_counter()
                    opt.zero_grad(set_to_none=True)
                    loss_sum = 0.0
                    for _ in range(a.accumulate):  # (autocast per micro-batch, backward outside: DLE's AMP loop)
                        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=prec == "bf16"):
                            loss = step_loss(head, ids, tt, labels, nsp, flat_pos, targets)
                        (loss / a.accumulate).backward()
                        loss_sum += loss.detach()
                    loss = loss_sum / a.accumulate
                    opt.step()
                    torch.cuda.synchronize(); dt = time.perf_counter() - t0
                    if i >= a.warmup: times.append(dt)
                med = statistics.median(times)
                row.update({"seq_per_s": batch * a.accumulate / med, "step_ms": med * 1e3, "loss": float(loss),
                            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20})
            except Exception as e:  # OOM or an API change: a failed row, and on to the next
                row.update({"failed": True, "error": f"{type(e).__name__}: {e}"[:300]})
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)
            torch.cuda.reset_peak_memory_stats()
