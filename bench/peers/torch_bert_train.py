#!/usr/bin/python3
"""PyTorch eager CPU pretraining-step benchmark (the peer for `unmask bench train`).

  /usr/bin/python3 bench/peers/torch_bert_train.py --model bert-base --seq 128 --batch 8 \
      --mlm-head full,masked --steps 3 --warmup 1 --threads 2

The model is BertForPreTraining written out in torch.nn modules the way Hugging Face's
modeling_bert.py computes it (as tests/python/bert_reference.py impl="hf" does for inference):
embeddings (word + position + token type, LayerNorm, dropout), post-LN encoder layers (separate
query/key/value Linear, scaled dot-product scores plus the additive mask, softmax, attention
dropout, output dense + dropout + residual LayerNorm, exact-erf GELU FFN), pooler (tanh) + NSP
classifier, MLM head (dense + GELU + LayerNorm, decoder tied to the word embeddings + bias).
Random weights (normal(0, 0.02)), dropout 0.1 in train mode, float32.

MLM head:
  full    logits for every position [B, T, V] and cross-entropy with ignore_index=-1 on the
          non-masked labels: what BertForPreTraining does (the ~0.86 seq/s figure in the issue)
  masked  the masked rows are gathered first ([B*P, H] -> [B*P, V]), as DLE's dense sequence
          output and unmask do: the fair algorithmic comparison

A timed step: zero_grad, forward, loss (MLM + NSP cross-entropy), backward, AdamW step
(torch.optim.AdamW, weight decay 0.01 except biases and LayerNorm). torch has no LAMB, so the peer
uses AdamW only. The batch has DLE's layout with every token real and --masked positions per
sequence (20 at seq 128, 80 at 512). One JSON row per (seq, batch, head):
  {"engine":"pytorch","mlm_head":"full","seq":128,"batch":8,"seq_per_s":..,"step_ms":..,...}
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SIZES = {  # layers, hidden, heads, intermediate
    "bert-base": (12, 768, 12, 3072),
    "bert-large": (24, 1024, 16, 4096),
    "random:tiny": (2, 128, 2, 512),
    "random:mini": (4, 256, 4, 1024),
    "random:small": (4, 512, 8, 2048),
}


class Layer(nn.Module):
    def __init__(self, H, NH, I, p, eps):
        super().__init__()
        self.NH, self.HS = NH, H // NH
        self.query, self.key, self.value = nn.Linear(H, H), nn.Linear(H, H), nn.Linear(H, H)
        self.attn_out, self.attn_ln = nn.Linear(H, H), nn.LayerNorm(H, eps=eps)
        self.inter, self.out, self.out_ln = nn.Linear(H, I), nn.Linear(I, H), nn.LayerNorm(H, eps=eps)
        self.drop = nn.Dropout(p)

    def forward(self, x, add_mask):
        B, T, H = x.shape
        split = lambda t: t.view(B, T, self.NH, self.HS).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.HS) + add_mask
        probs = self.drop(F.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H)
        a = self.attn_ln(self.drop(self.attn_out(ctx)) + x)
        return self.out_ln(self.drop(self.out(F.gelu(self.inter(a)))) + a)


class BertForPreTraining(nn.Module):
    def __init__(self, L, H, NH, I, V=30522, P=512, p=0.1, eps=1e-12):
        super().__init__()
        self.word, self.pos, self.tok_type = nn.Embedding(V, H), nn.Embedding(P, H), nn.Embedding(2, H)
        self.emb_ln, self.drop = nn.LayerNorm(H, eps=eps), nn.Dropout(p)
        self.layers = nn.ModuleList(Layer(H, NH, I, p, eps) for _ in range(L))
        self.pooler, self.nsp = nn.Linear(H, H), nn.Linear(H, 2)
        self.transform, self.transform_ln = nn.Linear(H, H), nn.LayerNorm(H, eps=eps)
        self.mlm_bias = nn.Parameter(torch.zeros(V))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, ids, seg, mask, positions, masked_ids, nsp_labels, head):
        B, T = ids.shape
        x = self.word(ids) + self.pos(torch.arange(T).unsqueeze(0)) + self.tok_type(seg)
        x = self.drop(self.emb_ln(x))
        add_mask = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, add_mask)
        nsp_logits = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        nsp_loss = F.cross_entropy(nsp_logits, nsp_labels)
        if head == "full":  # HF BertForPreTraining: every position through the head
            h = self.transform_ln(F.gelu(self.transform(x)))
            logits = F.linear(h, self.word.weight, self.mlm_bias)  # [B, T, V]
            labels = torch.full((B, T), -1, dtype=torch.long)
            labels.scatter_(1, positions, masked_ids)
            mlm_loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-1)
        else:  # masked rows only
            rows = (positions + torch.arange(B).unsqueeze(1) * T).view(-1)
            h = self.transform_ln(F.gelu(self.transform(x.reshape(B * T, -1).index_select(0, rows))))
            logits = F.linear(h, self.word.weight, self.mlm_bias)  # [B*P, V]
            mlm_loss = F.cross_entropy(logits, masked_ids.view(-1))
        return mlm_loss + nsp_loss


def make_batch(B, T, P, V, seed):
    """DLE layout, all tokens real: [CLS] A [SEP] B [SEP], P sorted masked positions -> [MASK]."""
    rng = np.random.default_rng(seed)
    sep = T // 2
    ids = rng.integers(1000, V, size=(B, T))
    ids[:, 0], ids[:, sep], ids[:, T - 1] = 101, 102, 102
    seg = (np.arange(T)[None, :] > sep).astype(np.int64).repeat(B, 0)
    cand = np.array([t for t in range(1, T - 1) if t != sep])
    pos = np.stack([np.sort(rng.choice(cand, P, replace=False)) for _ in range(B)])
    masked = np.take_along_axis(ids, pos, 1).copy()
    np.put_along_axis(ids, pos, 103, 1)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).long()  # noqa: E731
    return (t(ids), t(seg), torch.ones(B, T, dtype=torch.long), t(pos), t(masked),
            t(rng.integers(0, 2, size=B)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert-base", choices=sorted(SIZES))
    ap.add_argument("--seq", default="128")
    ap.add_argument("--batch", default="8")
    ap.add_argument("--masked", type=int, default=0, help="masked positions per sequence (0: 20 at 128, 80 at 512)")
    ap.add_argument("--mlm-head", default="full,masked")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    L, H, NH, I = SIZES[a.model]
    model = BertForPreTraining(L, H, NH, I).train()
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "ln" in n]
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "ln" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, eps=1e-6)
    for head in a.mlm_head.split(","):
        for T in [int(s) for s in a.seq.split(",")]:
            P = a.masked or (20 if T == 128 else 80 if T == 512 else max(1, round(0.15 * T)))
            for B in [int(b) for b in a.batch.split(",")]:
                batch = make_batch(B, T, P, 30522, a.seed)
                times, loss = [], float("nan")
                for i in range(a.warmup + a.steps):
                    t0 = time.perf_counter()
                    opt.zero_grad(set_to_none=True)
                    out = model(*batch, head=head)
                    out.backward()
                    opt.step()
                    dt = time.perf_counter() - t0
                    loss = float(out.detach())
                    if i >= a.warmup:
                        times.append(dt)
                med = float(np.median(times))
                print(json.dumps({"engine": "pytorch", "mlm_head": head, "model": a.model, "seq": T, "batch": B,
                                  "masked": P, "precision": "fp32", "optimizer": "adamw",
                                  "seq_per_s": B / med, "step_ms": med * 1e3, "steps": a.steps,
                                  "threads": a.threads, "loss": loss, "torch": torch.__version__,
                                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
                      flush=True)


if __name__ == "__main__":
    main()
