#!/usr/bin/python3
"""End-to-end parity test: unmask CLI vs the PyTorch reference (bert_reference.py).

  /usr/bin/python3 tests/python/parity.py --unmask build/unmask          # tiny checkpoints
  /usr/bin/python3 tests/python/parity.py --unmask build/unmask --base   # + BERT-base
  /usr/bin/python3 tests/python/parity.py --self-test                    # Python pieces only

Checkpoints are made with make_bert_checkpoint.py in a temp dir (--workdir to keep them):
tiny pretraining f32 / f16 / bf16, legacy LayerNorm.gamma/beta names (+ the I64 position_ids
buffer), bare BertModel (no "bert." prefix), MLM-only, QA, sequence and token classification;
BERT-base pretraining with --base.

CLI contract exercised:
  unmask infer   --model DIR --text STR [--pair STR] --dump OUT
      -> input_ids.npy, token_type_ids.npy (int64 [T]), last_hidden_state.npy [T,H],
         pooler_output.npy [H], mlm_logits.npy [T,V], nsp_logits.npy [2] (heads present)
  unmask forward --model DIR --input-ids ids.npy --token-type-ids tt.npy --attention-mask m.npy
                 --mode padded|packed --dump OUT
      -> last_hidden_state.npy [B,T,H] (packed: padding rows zero), pooler_output.npy [B,H],
         mlm_logits.npy [B,T,V], nsp_logits.npy [B,2], qa_start_logits.npy / qa_end_logits.npy
         [B,T], seqcls_logits.npy [B,L], tokcls_logits.npy [B,T,L]
`infer` outputs are compared with the reference run on the dumped input_ids/token_type_ids.

Criterion: rel = max|x - ref64| / max|ref64| per tensor (token-level tensors: real-token rows
only), pass if rel <= --tol (1e-5).  f16/bf16 checkpoints are compared with the reference run on
the same rounded weights (upcast exactly), so the same tolerance applies (--tol-half overrides).
Every case also checks the torch float32 reference against float64 with the same criterion
(sanity of the criterion: an fp32 engine can meet it).  Prints a table; exits 1 on any failure,
2 when the unmask binary is missing (unless --self-test).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bert_reference import (BertRef, TOKEN_LEVEL, no_transformer_fast_path, run_reference)  # noqa: E402
from make_bert_checkpoint import make_checkpoint  # noqa: E402
from st_io import RawTensor, read_safetensors, write_safetensors  # noqa: E402

CLS_ID, SEP_ID, PAD_ID = 101, 102, 0  # bert-base-uncased vocab

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Unaffable naïve café résumés cost $3.50 — or 4,000 yen?!",
    "a",
]
PAIRS = [
    ("How old are you?", "I am six years old."),
    ("The capital of France is [MASK].", "Paris is a lovely city, isn't it?"),
]


# --------------------------------------------------------------------------- results table
class Table:
    def __init__(self):
        self.rows = []

    def add(self, case, tensor, value, tol, ok, note=""):
        self.rows.append((case, tensor, value, tol, ok, note))
        return ok

    def fail(self, case, tensor, note):
        return self.add(case, tensor, None, None, False, note)

    def print(self):
        w_case = max([4] + [len(r[0]) for r in self.rows])
        w_t = max([6] + [len(r[1]) for r in self.rows])
        print(f"{'case':<{w_case}}  {'tensor':<{w_t}}  {'rel err':>10}  {'tol':>8}  result")
        print("-" * (w_case + w_t + 40))
        for case, tensor, value, tol, ok, note in self.rows:
            v = "-" if value is None else f"{value:10.3e}"
            t = "-" if tol is None else f"{tol:8.0e}"
            print(f"{case:<{w_case}}  {tensor:<{w_t}}  {v:>10}  {t:>8}  {'PASS' if ok else 'FAIL'}"
                  + (f"  {note}" if note else ""))
        n_fail = sum(1 for r in self.rows if not r[4])
        print(f"\n{len(self.rows) - n_fail} passed, {n_fail} failed")
        return n_fail


def rel_err(x, ref, mask=None):
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if x.shape != ref.shape:
        raise ValueError(f"shape {list(x.shape)} != reference {list(ref.shape)}")
    if mask is not None:  # keep real-token rows only: mask [B,T] over the leading dims
        x, ref = x[mask], ref[mask]
    if not np.all(np.isfinite(x)):
        return float("inf")
    scale = np.abs(ref).max()
    return float(np.abs(x - ref).max() / (scale if scale > 0 else 1.0))


# --------------------------------------------------------------------------- inputs
def random_batch(rng, B, T, V, lengths=None, pairs=True):
    """[CLS] a.. [SEP] (b.. [SEP]) + [PAD]s; mixed lengths, one full row and one of length >= 1."""
    if lengths is None:
        lengths = [int(x) for x in rng.integers(1, T + 1, B)]
        lengths[0] = T
        if B > 1:
            lengths[1] = min(T, 2)
    ids = np.full((B, T), PAD_ID, dtype=np.int64)
    tt = np.zeros((B, T), dtype=np.int64)
    mask = np.zeros((B, T), dtype=np.int64)
    for b, n in enumerate(lengths):
        row = rng.integers(999, V, n)
        row[0] = CLS_ID
        if n >= 2:
            row[n - 1] = SEP_ID
        if pairs and n >= 5 and b % 2 == 0:
            cut = int(rng.integers(2, n - 2))
            row[cut] = SEP_ID
            tt[b, cut + 1:n] = 1
        ids[b, :n] = row
        mask[b, :n] = 1
    return ids, tt, mask


# --------------------------------------------------------------------------- the runner
class Parity:
    def __init__(self, args, workdir):
        self.a = args
        self.work = workdir
        self.table = Table()
        self.models = {}
        self.rng = np.random.default_rng(args.seed)

    def model(self, d, dtype=torch.float64, impl="tel"):
        key = (d, dtype, impl)
        if key not in self.models:
            self.models[key] = BertRef.from_pretrained(d, dtype, impl)
        return self.models[key]

    def tol_for(self, dtype):
        return self.a.tol_half if dtype in ("f16", "bf16") else self.a.tol

    def run_cli(self, case, argv):
        cmd = [self.a.unmask] + argv
        if self.a.verbose:
            print("+", " ".join(repr(c) if " " in c else c for c in cmd), flush=True)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.a.timeout)
        except subprocess.TimeoutExpired:
            self.table.fail(case, "(cli)", f"timeout after {self.a.timeout}s: {' '.join(argv[:2])}")
            return False
        if p.returncode != 0:
            err = (p.stderr or p.stdout).strip().splitlines()
            self.table.fail(case, "(cli)", f"rc={p.returncode}: {err[-1] if err else ''}"[:200])
            return False
        return True

    def check_f32(self, case, ref64, ref32, mask):
        """Sanity of the criterion: the float32 torch reference must meet it against float64."""
        for name, r in ref64.items():
            e32 = rel_err(ref32[name], r, mask if name in TOKEN_LEVEL else None)
            self.table.add(case, name + " [torch-f32]", e32, self.a.tol, e32 <= self.a.tol)

    def compare(self, case, got_dir, ref64, mask, tol):
        """Compare the dumped .npy files against the float64 reference."""
        for name, r in ref64.items():
            m = mask if name in TOKEN_LEVEL else None
            path = os.path.join(got_dir, name + ".npy")
            if not os.path.exists(path):
                self.table.fail(case, name, "missing from dump")
                continue
            try:
                e = rel_err(np.load(path), r, m)
            except Exception as ex:  # shape mismatch etc.
                self.table.fail(case, name, str(ex)[:200])
                continue
            self.table.add(case, name, e, tol, e <= tol)

    # -- infer: single sentences and pairs ---------------------------------------------------
    def infer_cases(self, tag, d, dtype, texts, pairs):
        m64, m32 = self.model(d), self.model(d, torch.float32)
        for i, item in enumerate([(t, None) for t in texts] + list(pairs)):
            text, pair = item
            case = f"{tag}/infer-{'pair' if pair else 'single'}{i}"
            out = os.path.join(self.work, "dumps", case.replace("/", "_"))
            os.makedirs(out, exist_ok=True)
            argv = ["infer", "--model", d, "--text", text, "--dump", out] + (["--pair", pair] if pair else [])
            if not self.run_cli(case, argv):
                continue
            try:
                ids = np.load(os.path.join(out, "input_ids.npy")).astype(np.int64)
                tt = np.load(os.path.join(out, "token_type_ids.npy")).astype(np.int64)
            except Exception as ex:
                self.table.fail(case, "input_ids", f"cannot read dumped ids: {ex}"[:200])
                continue
            ok = (ids.ndim == 1 and tt.shape == ids.shape and len(ids) >= 2 and ids[0] == CLS_ID
                  and ids[-1] == SEP_ID and int((ids == SEP_ID).sum()) >= (2 if pair else 1)
                  and (pair is not None or not tt.any()) and (pair is None or tt[-1] == 1))
            self.table.add(case, "input_ids/token_type_ids", None, None, ok,
                           f"T={len(ids)} [CLS]..[SEP] layout" + ("" if ok else f" unexpected: {ids.tolist()[:12]}"))
            if not ok:
                continue
            r64, r32 = run_reference(m64, ids, tt), run_reference(m32, ids, tt)
            self.check_f32(case, r64, r32, None)
            self.compare(case, out, r64, None, self.tol_for(dtype))

    # -- forward: padded batches, both modes ---------------------------------------------------
    def forward_cases(self, tag, d, dtype, B, T, modes=("padded", "packed"), pairs=True):
        m64, m32 = self.model(d), self.model(d, torch.float32)
        V = m64.word.shape[0]
        ids, tt, mask = random_batch(self.rng, B, T, V, pairs=pairs)
        case_dir = os.path.join(self.work, "inputs", f"{tag}-B{B}T{T}".replace("/", "_"))
        os.makedirs(case_dir, exist_ok=True)
        paths = {}
        for n, arr in (("ids", ids), ("tt", tt), ("mask", mask)):
            paths[n] = os.path.join(case_dir, n + ".npy")
            np.save(paths[n], arr)
        r64, r32 = run_reference(m64, ids, tt, mask), run_reference(m32, ids, tt, mask)
        real = mask.astype(bool)
        lens = mask.sum(1).tolist()
        self.check_f32(f"{tag}/B{B}T{T}", r64, r32, real)
        if self.a.self_test:
            return
        for mode in modes:
            case = f"{tag}/forward-{mode}-B{B}T{T}"
            out = os.path.join(self.work, "dumps", case.replace("/", "_"))
            os.makedirs(out, exist_ok=True)
            argv = ["forward", "--model", d, "--input-ids", paths["ids"], "--token-type-ids", paths["tt"],
                    "--attention-mask", paths["mask"], "--mode", mode, "--dump", out]
            if not self.run_cli(case, argv):
                continue
            self.compare(case, out, r64, real, self.tol_for(dtype))
            if mode == "packed":
                p = os.path.join(out, "last_hidden_state.npy")
                if os.path.exists(p):
                    h = np.load(p)
                    if h.shape[:2] == real.shape:
                        z = float(np.abs(h[~real]).max()) if (~real).any() else 0.0
                        self.table.add(case, "last_hidden_state padding rows", z, 0.0, z == 0.0,
                                       f"max |x| at padding (must be 0); lengths {lens}")

    # -- python-only checks ----------------------------------------------------------------------
    def self_checks(self, tag, d):
        """TEL reference vs hand-written HF BertLayer (float64), fast-path guard."""
        m64, h64 = self.model(d), self.model(d, impl="hf")
        ids, tt, mask = random_batch(self.rng, 4, 19, m64.word.shape[0])
        a, b = run_reference(m64, ids, tt, mask), run_reference(h64, ids, tt, mask)
        real = mask.astype(bool)
        for k in a:
            e = rel_err(b[k], a[k], real if k in TOKEN_LEVEL else None)
            self.table.add(f"{tag}/self", k + " [TEL vs HF-layer f64]", e, 1e-12, e <= 1e-12)
        # the guard must fire if the fast path conditions are met (grad off, eval, padding mask)
        layer = self.model(d, torch.float32).layers[0]
        x = torch.zeros(2, 3, layer.self_attn.embed_dim)
        pad = torch.tensor([[False, False, False], [False, True, True]])
        fired = False
        with torch.no_grad(), no_transformer_fast_path():
            try:
                layer(x, src_key_padding_mask=pad)
            except RuntimeError as ex:
                fired = "fast path" in str(ex)
        self.table.add(f"{tag}/self", "fast-path guard fires with grad off", None, None, fired)

    def safetensors_roundtrip(self):
        g = torch.Generator().manual_seed(1)
        t = torch.randn(3, 5, 7, generator=g)
        tensors = {"a": RawTensor("F32", t.shape, t.numpy()),
                   "b": RawTensor("F16", t.shape, t.half().numpy()),
                   "c": RawTensor("BF16", t.shape, t.bfloat16().view(torch.int16).numpy().view(np.uint16)),
                   "d": RawTensor("I64", (1, 9), np.arange(9, dtype=np.int64)[None])}
        p = os.path.join(self.work, "rt.safetensors")
        write_safetensors(p, tensors)
        back, meta = read_safetensors(p)
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
        ok = (meta == {"format": "pt"} and (8 + n) % 8 == 0
              and np.array_equal(back["a"].to_float32(), t.numpy())
              and np.array_equal(back["b"].to_float32(), t.half().float().numpy())
              and np.array_equal(back["c"].to_float32(), t.bfloat16().float().numpy())
              and np.array_equal(back["d"].data, np.arange(9)[None]))
        self.table.add("safetensors", "write/read F32/F16/BF16/I64 round trip", None, None, ok)

    # -- the plan ----------------------------------------------------------------------------------
    def checkpoint(self, name, **kw):
        d = os.path.join(self.work, "ckpt", name)
        if not os.path.exists(os.path.join(d, "model.safetensors")):
            make_checkpoint(d, **kw)
        return d

    def want(self, tag):
        return not self.a.only or any(s in tag for s in self.a.only)

    def run(self):
        self.safetensors_roundtrip()
        st = self.a.self_test
        plan = [
            # tag, checkpoint kwargs, (B, T) batches, infer?
            ("tiny", dict(size="tiny", heads="pretraining", seed=1), [(5, 17), (2, 512)], True),
            ("tiny-f16", dict(size="tiny", heads="pretraining", dtype="f16", seed=2), [(5, 23)], True),
            ("tiny-bf16", dict(size="tiny", heads="pretraining", dtype="bf16", seed=3), [(5, 23)], False),
            ("tiny-legacy", dict(size="tiny", heads="pretraining", legacy_names=True, position_ids=True, seed=4),
             [(4, 21)], True),
            ("tiny-bare", dict(size="tiny", heads="model", bare=True, seed=5), [(4, 21)], True),
            ("tiny-mlm", dict(size="tiny", heads="mlm", seed=6), [(4, 21)], False),
            ("tiny-qa", dict(size="tiny", heads="qa", seed=7), [(4, 21)], False),
            ("tiny-seqcls", dict(size="tiny", heads="seqcls", seed=8), [(4, 21)], False),
            ("tiny-tokcls", dict(size="tiny", heads="tokcls", seed=9), [(4, 21)], False),
            ("tiny-odd", dict(size="tiny", heads="pretraining", hidden=96, layers=3, num_heads=6,
                              intermediate=200, seed=10), [(3, 33)], False),
        ]
        if self.a.base:
            plan.append(("base", dict(size="base", heads="pretraining", seed=11), [(3, 64)], True))
        for tag, kw, batches, infer in plan:
            if not self.want(tag):
                continue
            t0 = time.time()
            d = self.checkpoint(tag, **kw)
            dtype = kw.get("dtype", "f32")
            if st and tag in ("tiny", "tiny-odd", "tiny-legacy", "base"):
                self.self_checks(tag, d)
            for B, T in batches:
                self.forward_cases(tag, d, dtype, B, T)
            if infer and not st:
                texts = TEXTS if tag == "tiny" else TEXTS[:2]
                pairs = PAIRS if tag == "tiny" else PAIRS[:1]
                self.infer_cases(tag, d, dtype, texts, pairs)
            if self.a.verbose:
                print(f"[{tag}] {time.time() - t0:.1f}s", flush=True)
            # free the reference models of this checkpoint (base f64 is large)
            self.models = {k: v for k, v in self.models.items() if k[0] != d}
        return self.table.print()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--unmask", default=os.path.join(ROOT, "build", "unmask"), help="path to the unmask binary")
    ap.add_argument("--base", action="store_true", help="also test a BERT-base checkpoint")
    ap.add_argument("--self-test", action="store_true",
                    help="no CLI: check the Python pieces (fp32 vs fp64, TEL vs HF layer, guard, I/O)")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--tol-half", type=float, default=None, help="tolerance for f16/bf16 checkpoints (default --tol)")
    ap.add_argument("--workdir", help="keep checkpoints and dumps here (default: temp dir, removed)")
    ap.add_argument("--only", action="append", help="run only cases whose tag contains this (repeatable)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per CLI call")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    if a.tol_half is None:
        a.tol_half = a.tol
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if not a.self_test:
        a.unmask = os.path.abspath(a.unmask)
        if not (os.path.isfile(a.unmask) and os.access(a.unmask, os.X_OK)):
            print(f"parity.py: unmask binary not found at {a.unmask} (build it, or use --self-test)",
                  file=sys.stderr)
            return 2
    work = a.workdir or tempfile.mkdtemp(prefix="unmask-parity-")
    os.makedirs(work, exist_ok=True)
    try:
        n_fail = Parity(a, work).run()
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
