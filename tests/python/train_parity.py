#!/usr/bin/python3
"""Training parity: unmask's forward + explicit backward vs PyTorch autograd, and a 10-step AdamW
loss curve vs torch.optim.AdamW.

  /usr/bin/python3 tests/python/train_parity.py --unmask build/unmask [--workdir DIR] [--steps 10]

For each config (tiny BERT, C=64, 2 layers, 4 heads, I=128; hidden_act gelu and gelu_new, the tanh
GELU) it builds a BertForPreTraining checkpoint with make_bert_checkpoint.py and a random DLE-layout
batch (right padding, masked_lm_positions padded with 0 and a row without predictions, a real token
with id 0 = [PAD] to exercise padding_idx, mixed NSP labels), then:
  1. gradients: `unmask train-step --steps 1 --optimizer none --dump-grads G --losses L` against
     BertPretrainRef (bert_reference.py: BERT written out like HF modeling_bert.py, fp32, dropout
     off, MLM CrossEntropy(ignore -1) over every position + NSP CrossEntropy, loss.backward()).
     Criterion per tensor: ||g_unmask - g_torch|| / ||g_torch|| <= 1e-5 (--grad-tol); the loss
     |l_u - l_t| / |l_t| <= 1e-5. Every parameter must be dumped, with HF names and shapes.
     Tensors whose gradient is zero in exact arithmetic (torch fp64 norm <= 1e-9 of the whole
     gradient's: the attention key biases, since softmax ignores a shift shared by all keys) are
     held to ||g_unmask|| / ||G_torch64|| <= 1e-5 instead (a relative error would be noise/noise).
  2. AdamW: `unmask train-step --steps 10 --optimizer adamw` against torch.optim.AdamW on the same
     batch (lr 1e-3, betas (0.9, 0.999), eps 1e-6, weight decay 0.01 except names with bias /
     LayerNorm; no clipping): every step's loss within 1e-4 relative (--curve-tol).
  3. The model train-step saved (--save) after those steps is read by the reference loader (HF
     names and shapes; config architectures BertForPreTraining) and its loss, evaluated by torch,
     must match the torch-trained model's within 1e-4 relative.
Also reported (not a criterion): the torch fp32 gradient against torch fp64, the floor an fp32
engine can reach. Prints a table; exits 1 on any failure, 2 when the binary is missing.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bert_reference import BertPretrainRef, dle_mlm_labels, hf_param_order, load_checkpoint  # noqa: E402
from make_bert_checkpoint import make_checkpoint  # noqa: E402

CONFIGS = [
    # name, hidden_act, seed
    ("tiny-gelu", "gelu", 1),
    ("tiny-gelu_new", "gelu_new", 2),
]
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-6, 0.01


def make_batch(V: int, seed: int, B: int = 4, T: int = 24, P: int = 5) -> dict:
    """A DLE-layout batch: [CLS] A [SEP] B [SEP] then padding; masked positions sorted, 0-padded."""
    rng = np.random.default_rng(seed)
    lens = [T, 17, 9, 21][:B]
    ids = np.zeros((B, T), np.int32)
    seg = np.zeros((B, T), np.int32)
    mask = np.zeros((B, T), np.int32)
    pos = np.zeros((B, P), np.int32)
    mids = np.zeros((B, P), np.int32)
    for b, n in enumerate(lens):
        ids[b, :n] = rng.integers(1000, V, n)
        a_len = max(1, (n - 3) // 2)
        ids[b, 0], ids[b, 1 + a_len], ids[b, n - 1] = 101, 102, 102
        seg[b, 2 + a_len:n] = 1
        mask[b, :n] = 1
        n_pred = [P, 3, 0, 4][b]  # row 2 has no prediction; row 0 fills all P slots
        cand = [t for t in range(1, n - 1) if t != 1 + a_len]
        chosen = np.sort(rng.choice(cand, n_pred, replace=False)) if n_pred else np.array([], np.int32)
        pos[b, :n_pred] = chosen
        mids[b, :n_pred] = rng.integers(1000, V, n_pred)
        for t in chosen:
            ids[b, t] = 103  # [MASK]
    ids[0, 3] = 0 if 3 not in pos[0] else ids[0, 3]  # a real [PAD] token: padding_idx semantics
    nsp = np.array([0, 1, 1, 0][:B], np.int32)
    return {"input_ids": ids, "segment_ids": seg, "input_mask": mask, "masked_lm_positions": pos,
            "masked_lm_ids": mids, "next_sentence_labels": nsp}


def torch_inputs(batch: dict):
    T = batch["input_ids"].shape[1]
    labels = dle_mlm_labels(batch["masked_lm_positions"], batch["masked_lm_ids"], T)
    t = lambda a: torch.from_numpy(np.asarray(a, np.int64))  # noqa: E731
    return (t(batch["input_ids"]), t(batch["segment_ids"]), t(batch["input_mask"]), t(labels),
            t(batch["next_sentence_labels"]))


def torch_grads(model_dir: str, batch: dict, dtype) -> "tuple[float, dict]":
    cfg, weights = load_checkpoint(model_dir)
    m = BertPretrainRef(cfg, weights, dtype)
    loss, _, _ = m.pretraining_loss(*torch_inputs(batch))
    loss.backward()
    return float(loss), {n: p.grad.detach().double().numpy() for n, p in m.hf.items()}


def torch_adamw_curve(model_dir: str, batch: dict, steps: int) -> "tuple[list[float], float]":
    """Losses before each of `steps` AdamW updates, and the loss after the last one."""
    cfg, weights = load_checkpoint(model_dir)
    m = BertPretrainRef(cfg, weights, torch.float32)
    decay = [p for n, p in m.hf.items() if not m.no_decay(n)]
    no_decay = [p for n, p in m.hf.items() if m.no_decay(n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    inputs = torch_inputs(batch)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss, _, _ = m.pretraining_loss(*inputs)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    with torch.no_grad():
        final = float(m.pretraining_loss(*inputs)[0])
    return losses, final


def torch_loss_of(model_dir: str, batch: dict) -> float:
    """The loss of a saved checkpoint, read by the reference loader (HF names and shapes)."""
    cfg, weights = load_checkpoint(model_dir)
    with torch.no_grad():
        return float(BertPretrainRef(cfg, weights, torch.float64).pretraining_loss(*torch_inputs(batch))[0])


def run_unmask(exe: str, model_dir: str, batch_dir: str, out: str, steps: int, optimizer: str) -> "list[dict]":
    losses = os.path.join(out, "losses.jsonl")
    cmd = [exe, "train-step", "--model", model_dir, "--batch", batch_dir, "--steps", str(steps), "--optimizer", optimizer,
           "--lr", repr(LR), "--weight-decay", repr(WD), "--eps", repr(EPS), "--max-grad-norm", "0", "--losses", losses]
    if optimizer == "none":
        cmd += ["--dump-grads", os.path.join(out, "grads")]
    else:
        cmd += ["--save", os.path.join(out, "saved")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    with open(losses) as f:
        return [json.loads(line) for line in f if line.strip()]


def rel_norm(a: np.ndarray, b: np.ndarray) -> float:
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unmask", default="build/unmask", help="the unmask binary")
    ap.add_argument("--workdir", help="keep checkpoints and dumps here (default: a temp dir)")
    ap.add_argument("--steps", type=int, default=10, help="AdamW steps of the loss curve")
    ap.add_argument("--grad-tol", type=float, default=1e-5)
    ap.add_argument("--curve-tol", type=float, default=1e-4)
    a = ap.parse_args(argv)
    if not os.path.exists(a.unmask):
        print(f"train_parity: {a.unmask} not found (build it first)", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    torch.set_num_threads(2)
    work = a.workdir or tempfile.mkdtemp(prefix="unmask-train-parity-")
    rows, failures = [], 0
    t_start = time.time()

    def row(cfg, what, value, tol, note=""):
        nonlocal failures
        ok = value <= tol if tol is not None else True
        failures += 0 if ok else 1
        rows.append((cfg, what, f"{value:.3e}", f"{tol:.0e}" if tol is not None else "-",
                     ("ok" if ok else "FAIL") if tol is not None else "info", note))

    for name, act, seed in CONFIGS:
        d = os.path.join(work, name)
        model_dir, batch_dir = os.path.join(d, "model"), os.path.join(d, "batch")
        os.makedirs(batch_dir, exist_ok=True)
        cfg = make_checkpoint(model_dir, "tiny", "pretraining", hidden_act=act, seed=seed)
        batch = make_batch(cfg["vocab_size"], seed)
        for k, v in batch.items():
            np.save(os.path.join(batch_dir, k + ".npy"), v)

        # 1. loss and every gradient after one step
        out = os.path.join(d, "grad-run")
        os.makedirs(out, exist_ok=True)
        u = run_unmask(a.unmask, model_dir, batch_dir, out, 1, "none")
        loss32, g32 = torch_grads(model_dir, batch, torch.float32)
        loss64, g64 = torch_grads(model_dir, batch, torch.float64)
        row(name, "loss (rel)", abs(u[0]["loss"] - loss32) / abs(loss32), a.grad_tol,
            f"unmask {u[0]['loss']:.7f} torch {loss32:.7f}")
        worst, worst_name, worst64, zero_worst, zero_names, u64, u64_name = 0.0, "", 0.0, 0.0, [], 0.0, ""
        names = hf_param_order(cfg)
        total64 = float(np.sqrt(sum(np.sum(g * g) for g in g64.values())))
        dumped = sorted(f[:-4] for f in os.listdir(os.path.join(out, "grads")))
        if dumped != sorted(names):
            failures += 1
            rows.append((name, "dumped names", "-", "-", "FAIL",
                         f"missing {sorted(set(names) - set(dumped))[:4]} extra {sorted(set(dumped) - set(names))[:4]}"))
        for n in names:
            path = os.path.join(out, "grads", n + ".npy")
            if not os.path.exists(path):
                continue
            gu = np.load(path).astype(np.float64)
            if gu.shape != g32[n].shape:
                failures += 1
                rows.append((name, f"shape {n}", "-", "-", "FAIL", f"{gu.shape} vs {g32[n].shape}"))
                continue
            if np.linalg.norm(g64[n]) <= 1e-9 * total64:
                # Zero in exact arithmetic (the key bias: softmax ignores a shift shared by all
                # keys), so a relative error is noise over noise: compare against the whole
                # gradient's norm instead.
                zero_names.append(n)
                zero_worst = max(zero_worst, float(np.linalg.norm(gu)) / total64)
                continue
            r = rel_norm(gu, g32[n])
            if r > a.grad_tol:
                row(name, f"grad {n}", r, a.grad_tol)
            if r >= worst:
                worst, worst_name = r, n
            worst64 = max(worst64, rel_norm(g32[n], g64[n]))
            if rel_norm(gu, g64[n]) >= u64:
                u64, u64_name = rel_norm(gu, g64[n]), n
        row(name, f"grad worst of {len(names) - len(zero_names)}", worst, a.grad_tol, worst_name)
        if zero_names:
            row(name, f"grad of {len(zero_names)} zero tensors, |g|/|G|", zero_worst, a.grad_tol,
                "exactly 0 in exact arithmetic: " + ", ".join(sorted({z.split('.', 4)[-1] for z in zero_names})))
        row(name, "torch fp32 vs fp64 grad worst", worst64, None, "the fp32 floor")
        row(name, "unmask vs torch fp64 grad worst", u64, None, u64_name)

        # 2. the AdamW loss curve
        out = os.path.join(d, "adamw-run")
        os.makedirs(out, exist_ok=True)
        u = run_unmask(a.unmask, model_dir, batch_dir, out, a.steps, "adamw")
        t, t_final = torch_adamw_curve(model_dir, batch, a.steps)
        if len(u) != a.steps:
            failures += 1
            rows.append((name, "adamw steps", str(len(u)), str(a.steps), "FAIL", ""))
        else:
            errs = [abs(x["loss"] - y) / max(1.0, abs(y)) for x, y in zip(u, t)]
            i = int(np.argmax(errs))
            row(name, f"adamw {a.steps}-step loss curve (worst)", errs[i], a.curve_tol,
                f"step {i}: unmask {u[i]['loss']:.6f} torch {t[i]:.6f}; {t[0]:.4f} -> {t[-1]:.4f}")
        # 3. the model unmask saved after those steps, loaded by the reference (HF names/shapes)
        saved = os.path.join(out, "saved")
        with open(os.path.join(saved, "config.json")) as f:
            arch = json.load(f).get("architectures")
        if arch != ["BertForPreTraining"]:
            failures += 1
            rows.append((name, "saved architectures", str(arch), "-", "FAIL", ""))
        u_final = torch_loss_of(saved, batch)
        row(name, f"saved model's loss after {a.steps} steps", abs(u_final - t_final) / abs(t_final), a.curve_tol,
            f"unmask-trained {u_final:.6f}, torch-trained {t_final:.6f} (both evaluated by torch)")

    w = [max(len(str(r[i])) for r in rows + [("config", "check", "value", "tol", "result", "note")]) for i in range(6)]
    header = ("config", "check", "value", "tol", "result", "note")
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())
    passed = sum(1 for r in rows if r[4] == "ok")
    kept = failures or a.workdir
    print(f"train_parity: {passed} passed, {failures} failed ({time.time() - t_start:.1f} s"
          + (f", work dir kept: {work})" if kept else ")"))
    if not kept:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
