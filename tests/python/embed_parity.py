"""`unmask embed` against the PyTorch reference (tests/python/bert_reference.py, float64): CLS and
mean pooling of every line, run in packed batches by unmask and padded by the reference.

  /usr/bin/python3 tests/python/embed_parity.py --unmask build/unmask

The lines are made of words that are single tokens of the bert-base-uncased vocabulary, so
their ids are the vocabulary lines (no second tokenizer needed); lengths vary from 1 to 40
words, and there are more lines than one batch.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bert_checkpoint  # noqa: E402
from bert_reference import BertRef, run_reference  # noqa: E402
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--unmask", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as w:
        model_dir = os.path.join(w, "m")
        make_bert_checkpoint.main(["--out", model_dir, "--size", "tiny", "--heads", "pretraining", "--seed", "9"])
        vocab = [l.rstrip("\n") for l in open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8")]
        ids_of = {t: i for i, t in enumerate(vocab)}
        words = ["the", "cat", "sat", "on", "mat", "river", "bank", "music", "paris", "city", "quickly", "blue"]
        rng = np.random.default_rng(4)
        lines = [" ".join(rng.choice(words, size=int(rng.integers(1, 41)))) for _ in range(45)]
        with open(os.path.join(w, "in.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        model = BertRef.from_pretrained(model_dir, torch.float64, "tel")
        failures = 0
        for pooling in ("cls", "mean"):
            out = os.path.join(w, f"{pooling}.npy")
            subprocess.run([a.unmask, "embed", "--model", model_dir, "--input", os.path.join(w, "in.txt"), "--output",
                            out, "--pooling", pooling, "--batch", "8", "--threads", "2"], check=True,
                           stdout=subprocess.DEVNULL)
            got = np.load(out)
            assert got.shape == (len(lines), 64), got.shape
            worst = 0.0
            for i, line in enumerate(lines):
                ids = np.array([ids_of["[CLS]"]] + [ids_of[t] for t in line.split()] + [ids_of["[SEP]"]])
                h = run_reference(model, ids)["last_hidden_state"]
                want = h[0] if pooling == "cls" else h.mean(axis=0)
                worst = max(worst, float(np.abs(got[i] - want).max()))
            ok = worst < 1e-5
            failures += not ok
            print(f"embed {pooling}: {len(lines)} lines, max |unmask - torch float64| = {worst:.2e} "
                  f"({'ok' if ok else 'FAIL'}, tolerance 1e-5)")
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
