#!/usr/bin/env python3
"""Loads an unmask checkpoint with transformers' BertForPreTraining.from_pretrained (no renaming) and
compares its outputs with `unmask infer --dump` on the same text. Needs transformers (not in Debian
12; run where it is installed, e.g. the GPU machine):

  build/unmask infer --model CKPT --text "the [MASK] statement imports a module." --pair "it runs the code." --dump DUMP
  python3 tests/python/check_transformers_load.py CKPT DUMP

Run on 2026-11-22 with transformers 5.17 on a `unmask pretrain` checkpoint: no missing,
unexpected or mis-shaped keys; relative errors 1.1e-7 (hidden states), 2.7e-7 (MLM logits),
1.2e-7 (NSP logits); log in bench/gpu/RUNS.md (2026-11-22-h100-train).
"""
import json, sys, numpy as np, torch, transformers
from transformers import BertForPreTraining, BertTokenizer
ck, dump = sys.argv[1], sys.argv[2]
print("transformers", transformers.__version__, "torch", torch.__version__)
model = BertForPreTraining.from_pretrained(ck, output_loading_info=True)
model, info = model
print("loading info:", {k: v for k, v in info.items()})
assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
model.eval()
tok = BertTokenizer(ck + "/vocab.txt", do_lower_case=True)
enc = tok("the [MASK] statement imports a module.", "it runs the code.")
ids = np.load(dump + "/input_ids.npy").reshape(-1)
tt = np.load(dump + "/token_type_ids.npy").reshape(-1)
print("HF tokenizer ids equal unmask's:", enc["input_ids"] == ids.tolist(), "types:", enc["token_type_ids"] == tt.tolist())
with torch.no_grad():
    out = model(input_ids=torch.tensor(ids[None].astype(np.int64)), token_type_ids=torch.tensor(tt[None].astype(np.int64)),
                output_hidden_states=True)
def rel(a, b):
    a = np.asarray(a, np.float64).reshape(-1); b = np.asarray(b, np.float64).reshape(-1)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
res = {
  "last_hidden_state": rel(np.load(dump + "/last_hidden_state.npy"), out.hidden_states[-1][0].numpy()),
  "mlm_logits": rel(np.load(dump + "/mlm_logits.npy"), out.prediction_logits[0].numpy()),
  "nsp_logits": rel(np.load(dump + "/nsp_logits.npy"), out.seq_relationship_logits[0].numpy()),
}
print(json.dumps(res, indent=1))
ok = all(v < 1e-5 for v in res.values())
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
