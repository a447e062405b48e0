#!/usr/bin/python3
"""Build a random-weight BERT checkpoint in Hugging Face layout (config.json, model.safetensors,
vocab.txt, tokenizer_config.json) with PyTorch.  Run with Debian's /usr/bin/python3 (has torch).

  /usr/bin/python3 tests/python/make_bert_checkpoint.py --out /tmp/bert-tiny --size tiny
  /usr/bin/python3 tests/python/make_bert_checkpoint.py --out /tmp/bert-base --size base --heads pretraining
  ... --heads qa|seqcls|tokcls|mlm|model [--num-labels L] [--bare] [--legacy-names] [--dtype f16|bf16]

Parameter names and head layouts follow HF modeling_bert.py (bert.md section 4.2):
  pretraining  BertForPreTraining            bert.* + pooler + cls.predictions.* + cls.seq_relationship.*
  mlm          BertForMaskedLM               bert.* (no pooler) + cls.predictions.*
  model        BertModel                     bert.* + pooler  (with --bare: saved without "bert.")
  qa           BertForQuestionAnswering      bert.* (no pooler) + qa_outputs [2,H]
  seqcls       BertForSequenceClassification bert.* + pooler + classifier [L,H]
  tokcls       BertForTokenClassification    bert.* (no pooler) + classifier [L,H]
The MLM decoder weight is tied to the word embeddings and is NOT stored (HF drops
cls.predictions.decoder.weight/.bias from safetensors); the decoder bias is cls.predictions.bias.

Random init: Linear/Embedding weights ~ N(0, 0.02) (padding row of the word embeddings zeroed, as
HF does); every bias ~ N(0, 0.02) (non-zero, to catch a missing bias); LayerNorm weight
~ 1 + N(0, 0.1) and bias ~ N(0, 0.05) (so LN parameters are exercised).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import RawTensor, write_safetensors  # noqa: E402

DEFAULT_VOCAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "bert-base-uncased-vocab.txt")

SIZES = {
    # name: (hidden, layers, heads, intermediate)
    "tiny": (64, 2, 4, 128),
    "base": (768, 12, 12, 3072),
    "large": (1024, 24, 16, 4096),
}

ARCHITECTURES = {
    "pretraining": "BertForPreTraining",
    "mlm": "BertForMaskedLM",
    "model": "BertModel",
    "qa": "BertForQuestionAnswering",
    "seqcls": "BertForSequenceClassification",
    "tokcls": "BertForTokenClassification",
}
HAS_POOLER = {"pretraining": True, "mlm": False, "model": True, "qa": False, "seqcls": True, "tokcls": False}
DEFAULT_NUM_LABELS = {"qa": 2, "seqcls": 3, "tokcls": 5}
TORCH_DTYPE_NAME = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def count_vocab(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def build_state_dict(cfg: dict, heads: str, seed: int) -> "dict[str, torch.Tensor]":
    """float32 state dict with HF names (always with the "bert." prefix, modern LayerNorm names)."""
    g = torch.Generator().manual_seed(seed)
    H, L, I, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    std = cfg["initializer_range"]

    def normal(*shape, mean=0.0, s=std):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * s + mean

    sd = {}

    def linear(prefix, out_f, in_f):
        sd[prefix + ".weight"] = normal(out_f, in_f)
        sd[prefix + ".bias"] = normal(out_f)

    def layernorm(prefix, n):
        sd[prefix + ".weight"] = normal(n, mean=1.0, s=0.1)
        sd[prefix + ".bias"] = normal(n, s=0.05)

    word = normal(V, H)
    pad = cfg.get("pad_token_id")
    if pad is not None and 0 <= pad < V:
        word[pad].zero_()
    sd["bert.embeddings.word_embeddings.weight"] = word
    sd["bert.embeddings.position_embeddings.weight"] = normal(cfg["max_position_embeddings"], H)
    sd["bert.embeddings.token_type_embeddings.weight"] = normal(cfg["type_vocab_size"], H)
    layernorm("bert.embeddings.LayerNorm", H)
    for i in range(L):
        p = f"bert.encoder.layer.{i}."
        for name in ("query", "key", "value"):
            linear(p + "attention.self." + name, H, H)
        linear(p + "attention.output.dense", H, H)
        layernorm(p + "attention.output.LayerNorm", H)
        linear(p + "intermediate.dense", I, H)
        linear(p + "output.dense", H, I)
        layernorm(p + "output.LayerNorm", H)
    if HAS_POOLER[heads]:
        linear("bert.pooler.dense", H, H)
    if heads in ("pretraining", "mlm"):
        linear("cls.predictions.transform.dense", H, H)
        layernorm("cls.predictions.transform.LayerNorm", H)
        sd["cls.predictions.bias"] = normal(V)
    if heads == "pretraining":
        linear("cls.seq_relationship", 2, H)
    if heads == "qa":
        linear("qa_outputs", 2, H)
    if heads in ("seqcls", "tokcls"):
        linear("classifier", cfg["num_labels"], H)
    return sd


def rename_for_storage(sd: dict, bare: bool, legacy_names: bool) -> dict:
    out = {}
    for name, t in sd.items():
        n = name
        if bare:
            assert n.startswith("bert."), n
            n = n[len("bert."):]
        if legacy_names and ".LayerNorm." in n:
            n = n.replace(".LayerNorm.weight", ".LayerNorm.gamma").replace(".LayerNorm.bias", ".LayerNorm.beta")
        out[n] = t
    return out


def to_raw(t: torch.Tensor, dtype: str) -> RawTensor:
    if t.dtype == torch.int64:
        return RawTensor("I64", t.shape, t.numpy())
    if dtype == "f32":
        return RawTensor("F32", t.shape, t.numpy())
    if dtype == "f16":
        return RawTensor("F16", t.shape, t.to(torch.float16).numpy())
    if dtype == "bf16":
        bits = t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return RawTensor("BF16", t.shape, bits)
    raise ValueError(dtype)


def make_checkpoint(out: str, size: str = "tiny", heads: str = "pretraining", *, hidden=None, layers=None,
                    num_heads=None, intermediate=None, max_pos=512, type_vocab=2, num_labels=None,
                    eps=1e-12, hidden_act="gelu", dtype="f32", seed=0, bare=False, legacy_names=False,
                    position_ids=False, vocab=DEFAULT_VOCAB, do_lower_case=True) -> dict:
    """Write a checkpoint directory; returns the config dict."""
    if heads not in ARCHITECTURES:
        raise ValueError(f"unknown heads {heads!r}")
    if bare and heads != "model":
        raise ValueError("--bare saves a bare BertModel: use it with --heads model")
    H, L, NH, I = SIZES[size]
    H, L, NH, I = hidden or H, layers or L, num_heads or NH, intermediate or I
    if H % NH:
        raise ValueError(f"hidden {H} not divisible by heads {NH}")
    V = count_vocab(vocab)
    cfg = {
        "architectures": [ARCHITECTURES[heads]],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": hidden_act,
        "hidden_dropout_prob": 0.1,
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_norm_eps": eps,
        "max_position_embeddings": max_pos,
        "model_type": "bert",
        "num_attention_heads": NH,
        "num_hidden_layers": L,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "torch_dtype": TORCH_DTYPE_NAME[dtype],
        "transformers_version": "4.44.0",
        "type_vocab_size": type_vocab,
        "use_cache": True,
        "vocab_size": V,
    }
    if heads in DEFAULT_NUM_LABELS:
        nl = num_labels if num_labels is not None else DEFAULT_NUM_LABELS[heads]
        if heads == "qa" and nl != 2:
            raise ValueError("qa head has exactly 2 labels (start/end)")
        cfg["num_labels"] = nl  # used by build_state_dict; HF derives it from id2label
        cfg["id2label"] = {str(i): f"LABEL_{i}" for i in range(nl)}
        cfg["label2id"] = {f"LABEL_{i}": i for i in range(nl)}
    sd = build_state_dict(cfg, heads, seed)
    cfg.pop("num_labels", None)
    if position_ids:  # old checkpoints store this int64 buffer
        sd["bert.embeddings.position_ids"] = torch.arange(max_pos, dtype=torch.int64).unsqueeze(0)
    sd = rename_for_storage(sd, bare, legacy_names)

    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), {k: to_raw(v, dtype) for k, v in sd.items()},
                      {"format": "pt"})
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copyfile(vocab, os.path.join(out, "vocab.txt"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": do_lower_case, "model_max_length": max_pos,
                   "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]", "sep_token": "[SEP]",
                   "pad_token": "[PAD]", "cls_token": "[CLS]", "mask_token": "[MASK]"}, f, indent=2)
        f.write("\n")
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output model directory")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny",
                    help="tiny: H=64 L=2 NH=4 I=128; base: 768/12/12/3072; large: 1024/24/16/4096")
    ap.add_argument("--hidden", type=int, help="override hidden_size")
    ap.add_argument("--layers", type=int, help="override num_hidden_layers")
    ap.add_argument("--num-heads", type=int, help="override num_attention_heads")
    ap.add_argument("--intermediate", type=int, help="override intermediate_size")
    ap.add_argument("--max-pos", type=int, default=512, help="max_position_embeddings")
    ap.add_argument("--type-vocab", type=int, default=2, help="type_vocab_size")
    ap.add_argument("--eps", type=float, default=1e-12, help="layer_norm_eps")
    ap.add_argument("--hidden-act", default="gelu", choices=["gelu", "gelu_new", "relu"])
    ap.add_argument("--heads", choices=sorted(ARCHITECTURES), default="pretraining", help="which head(s)")
    ap.add_argument("--num-labels", type=int, help="labels for seqcls/tokcls (default 3/5)")
    ap.add_argument("--bare", action="store_true", help="bare BertModel saved without the 'bert.' prefix")
    ap.add_argument("--legacy-names", action="store_true", help="LayerNorm.gamma/beta instead of weight/bias")
    ap.add_argument("--position-ids", action="store_true", help="also store bert.embeddings.position_ids (I64)")
    ap.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32", help="stored weight dtype")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", default=DEFAULT_VOCAB, help="vocab.txt to copy (sets vocab_size)")
    ap.add_argument("--cased", action="store_true", help="write do_lower_case=false")
    a = ap.parse_args(argv)
    heads = "model" if a.bare else a.heads
    cfg = make_checkpoint(a.out, a.size, heads, hidden=a.hidden, layers=a.layers, num_heads=a.num_heads,
                          intermediate=a.intermediate, max_pos=a.max_pos, type_vocab=a.type_vocab,
                          num_labels=a.num_labels, eps=a.eps, hidden_act=a.hidden_act, dtype=a.dtype,
                          seed=a.seed, bare=a.bare, legacy_names=a.legacy_names, position_ids=a.position_ids,
                          vocab=a.vocab, do_lower_case=not a.cased)
    print(f"wrote {a.out}: {cfg['architectures'][0]} H={cfg['hidden_size']} L={cfg['num_hidden_layers']} "
          f"NH={cfg['num_attention_heads']} I={cfg['intermediate_size']} V={cfg['vocab_size']} dtype={a.dtype}")


if __name__ == "__main__":
    main()
