#!/usr/bin/python3
"""Export a BertModel (encoder + pooler) from a checkpoint dir made by
tests/python/make_bert_checkpoint.py to ONNX, for the onnxruntime peer benchmark.

  /usr/bin/python3 bench/peers/export_onnx.py --model /tmp/unmask-bench/bert-base --out /tmp/unmask-bench/bert-base.onnx

Model: the hand-written HF-equivalent BERT from tests/python/bert_reference.py (impl="hf":
post-LN, exact erf GELU, additive mask (1 - mask) * finfo(float32).min) in float32 — not
nn.TransformerEncoderLayer, whose fused fast path does not export.  Inputs input_ids,
attention_mask, token_type_ids (int64 [batch, seq]); outputs last_hidden_state [batch, seq, H],
pooler_output [batch, H]; dynamic axes batch/seq.  TorchScript exporter (torch.onnx.export),
opset 14 by default.  The `onnx` python package is not needed (and not installed here): the
exporter serialises the protobuf itself.  With --check, the export is run through
onnxruntime-node (bench/peers/node_modules) and compared with the PyTorch outputs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "python"))
from bert_reference import BertRef  # noqa: E402


class Encoder(torch.nn.Module):
    def __init__(self, ref: BertRef):
        super().__init__()
        if not ref.heads["pooler"]:
            raise SystemExit("checkpoint has no pooler (use --heads model|pretraining|seqcls)")
        self.ref = ref

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.ref.encode(input_ids, attention_mask, token_type_ids)


def load_encoder(model_dir: str) -> Encoder:
    ref = BertRef.from_pretrained(model_dir, torch.float32, impl="hf")
    for p in ref.parameters():
        p.requires_grad_(False)
    return Encoder(ref).eval()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint dir (make_bert_checkpoint.py)")
    ap.add_argument("--out", required=True, help="output .onnx path")
    ap.add_argument("--opset", type=int, default=14)
    ap.add_argument("--check", action="store_true", help="verify with onnxruntime-node against PyTorch")
    a = ap.parse_args(argv)
    model = load_encoder(a.model)
    g = torch.Generator().manual_seed(0)
    B, T = 2, 16
    ids = torch.randint(1000, 30000, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, 9:] = 0
    tt = torch.zeros(B, T, dtype=torch.int64)
    tt[0, 8:] = 1
    tmp = a.out + ".tmp"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids, mask, tt), tmp, opset_version=a.opset, do_constant_folding=True,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state", "pooler_output"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "attention_mask": {0: "batch", 1: "seq"},
                                        "token_type_ids": {0: "batch", 1: "seq"},
                                        "last_hidden_state": {0: "batch", 1: "seq"},
                                        "pooler_output": {0: "batch"}})
    os.replace(tmp, a.out)
    print(f"wrote {a.out} ({os.path.getsize(a.out) / 2**20:.1f} MiB, opset {a.opset})")
    if a.check:
        with torch.no_grad():
            h, p = model(ids, mask, tt)
        with tempfile.TemporaryDirectory() as td:
            for n, t in (("input_ids", ids), ("attention_mask", mask), ("token_type_ids", tt)):
                with open(os.path.join(td, n + ".json"), "w") as f:
                    json.dump({"dims": list(t.shape), "data": t.flatten().tolist()}, f)
            js = os.path.join(td, "check.mjs")
            with open(js, "w") as f:
                f.write(CHECK_JS)
            res = subprocess.run(["node", js, os.path.abspath(a.out), td], capture_output=True, text=True,
                                 cwd=HERE, env=dict(os.environ, NODE_PATH=os.path.join(HERE, "node_modules")))
            if res.returncode:
                raise SystemExit("onnxruntime check failed:\n" + res.stderr)
            out = json.loads(res.stdout)
        real = mask.bool().numpy()
        for name, ref in (("last_hidden_state", h.numpy()), ("pooler_output", p.numpy())):
            got = np.array(out[name], dtype=np.float64).reshape(ref.shape)
            r = ref.astype(np.float64)
            if name == "last_hidden_state":
                got, r = got[real], r[real]
            err = np.abs(got - r).max() / np.abs(r).max()
            print(f"onnxruntime vs PyTorch {name}: rel err {err:.2e}")
            if not err <= 1e-5:
                raise SystemExit("ONNX export does not match PyTorch")


CHECK_JS = r"""
import { createRequire } from 'module';
import fs from 'fs';
import path from 'path';
const require = createRequire(path.join(process.cwd(), 'x.js'));
const ort = require('onnxruntime-node');
const [model, dir] = process.argv.slice(2);
const sess = await ort.InferenceSession.create(model, { intraOpNumThreads: 2, interOpNumThreads: 1 });
const feeds = {};
for (const n of ['input_ids', 'attention_mask', 'token_type_ids']) {
  const j = JSON.parse(fs.readFileSync(path.join(dir, n + '.json')));
  feeds[n] = new ort.Tensor('int64', BigInt64Array.from(j.data.map(BigInt)), j.dims);
}
const r = await sess.run(feeds);
console.log(JSON.stringify({ last_hidden_state: Array.from(r.last_hidden_state.data),
                             pooler_output: Array.from(r.pooler_output.data) }));
"""

if __name__ == "__main__":
    main()
