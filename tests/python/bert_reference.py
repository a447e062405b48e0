#!/usr/bin/python3
"""PyTorch reference forward for unmask's parity tests.  Run with Debian's /usr/bin/python3.

  /usr/bin/python3 tests/python/bert_reference.py --model DIR --input-ids ids.npy \
      [--token-type-ids tt.npy] [--attention-mask m.npy] --out OUTDIR [--dtype float64|float32] [--impl tel|hf]

Inputs are int64 .npy arrays [B,T] (or [T]: treated as B=1 and the outputs squeezed).  Writes
last_hidden_state.npy [B,T,H], and when the checkpoint has the head: pooler_output.npy [B,H],
mlm_logits.npy [B,T,V], nsp_logits.npy [B,2], qa_start_logits.npy / qa_end_logits.npy [B,T],
seqcls_logits.npy [B,L], tokcls_logits.npy [B,T,L]  (the same names the C++ `--dump` uses).

Two encoder implementations, identical in exact arithmetic:
  * impl="tel" (default): one torch.nn.TransformerEncoderLayer per BERT layer
    (d_model=H, nhead=NH, dim_feedforward=I, dropout=0, activation=gelu, layer_norm_eps=eps,
    batch_first=True, norm_first=False) with in_proj = cat(query, key, value),
    out_proj = attention.output.dense, linear1 = intermediate.dense, linear2 = output.dense,
    norm1 = attention.output.LayerNorm, norm2 = output.LayerNorm.  Post-LN, exact erf GELU:
    this is HF's BertLayer.  Padding goes in as src_key_padding_mask (True = padding).
  * impl="hf": the same layer written out by hand the way HF modeling_bert.py does it
    (additive mask (1 - mask) * finfo(dtype).min, scores / sqrt(head_dim)).  Used to cross-check
    the TEL mapping, and by the ONNX export / PyTorch benchmark in bench/peers (it exports cleanly).

TransformerEncoderLayer "fast path" (torch 1.13): in eval mode, with even nhead and gelu/relu, when
no parameter requires grad (or grad is disabled) the layer calls the fused
torch._transformer_encoder_layer_fwd kernel instead of the Python code (different op order), and
nn.TransformerEncoder additionally converts the batch to nested tensors and returns exactly 0 at
padded positions (checked here: a padded row came back all zeros).  We disable it by (1) keeping
every TEL parameter requires_grad=True and running the encoder under torch.enable_grad() — the
fast-path condition "grad is enabled and at least one of ... requires_grad" then fails — (2)
calling the layers one by one instead of through nn.TransformerEncoder, and (3) as a guard,
temporarily replacing torch._transformer_encoder_layer_fwd and torch._native_multi_head_attention
with functions that raise, so a torch that took the fast path anyway fails loudly instead of
silently computing something else (parity.py checks the guard fires when grad is off).  torch 1.13
has no torch.backends.mha.set_fastpath_enabled; when a newer torch has it we switch it off too.

The checkpoint is read with our own safetensors reader (st_io.py): F32/F16/BF16 weights (upcast
exactly), "bert." prefix or bare BertModel names, legacy LayerNorm.gamma/beta names.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_io import read_model_dir  # noqa: E402

OUTPUT_NAMES = ("last_hidden_state", "pooler_output", "mlm_logits", "nsp_logits",
                "qa_start_logits", "qa_end_logits", "seqcls_logits", "tokcls_logits")
TOKEN_LEVEL = {"last_hidden_state", "mlm_logits", "qa_start_logits", "qa_end_logits", "tokcls_logits"}


# --------------------------------------------------------------------------- checkpoint loading
def normalize_name(name: str) -> str:
    """HF name -> canonical name: 'bert.' prefix stripped, LayerNorm.gamma/beta -> weight/bias."""
    if name.startswith("bert."):
        name = name[len("bert."):]
    if name.endswith(".gamma"):
        name = name[:-len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[:-len(".beta")] + ".bias"
    return name


def load_checkpoint(model_dir: str):
    """-> (config dict, dict canonical name -> RawTensor, stored dtypes set)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = read_model_dir(model_dir)
    weights = {}
    for name, t in raw.items():
        n = normalize_name(name)
        if n in ("embeddings.position_ids", "cls.predictions.decoder.weight"):
            continue  # buffer / tied to the word embeddings (HF re-ties on load)
        if n == "cls.predictions.decoder.bias":
            if "cls.predictions.bias" in raw:
                continue
            n = "cls.predictions.bias"
        if n in weights:
            raise ValueError(f"{model_dir}: duplicate tensor after normalisation: {name} -> {n}")
        weights[n] = t
    return cfg, weights


def detect_heads(cfg: dict, weights: dict) -> dict:
    arch = (cfg.get("architectures") or [""])[0]
    has = {
        "pooler": "pooler.dense.weight" in weights,
        "mlm": "cls.predictions.transform.dense.weight" in weights,
        "nsp": "cls.seq_relationship.weight" in weights,
        "qa": "qa_outputs.weight" in weights,
        "seqcls": False,
        "tokcls": False,
    }
    if "classifier.weight" in weights:
        if arch == "BertForTokenClassification":
            has["tokcls"] = True
        elif arch == "BertForSequenceClassification":
            has["seqcls"] = True
        else:  # no architecture hint: a pooler means sequence classification
            has["seqcls" if has["pooler"] else "tokcls"] = True
    return has


def activation_fn(name: str):
    if name == "gelu":
        return "gelu"  # F.gelu, exact erf form (HF GELUActivation)
    if name == "gelu_new":
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    if name == "relu":
        return "relu"
    raise ValueError(f"unsupported hidden_act {name!r}")


def _act_call(act):
    return {"gelu": F.gelu, "relu": F.relu}.get(act, act) if isinstance(act, str) else act


@contextlib.contextmanager
def no_transformer_fast_path():
    """Make any use of torch's fused TransformerEncoderLayer / MHA fast path an error."""
    saved = {}

    def forbid(name):
        def f(*a, **k):
            raise RuntimeError(f"torch fast path {name} was taken; the reference must not use it")
        return f

    for name in ("_transformer_encoder_layer_fwd", "_native_multi_head_attention"):
        if hasattr(torch, name):
            saved[name] = getattr(torch, name)
            setattr(torch, name, forbid(name))
    mha = getattr(getattr(torch.backends, "mha", None), "set_fastpath_enabled", None)
    prev = None
    if mha is not None:
        prev = torch.backends.mha.get_fastpath_enabled()
        mha(False)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
        if mha is not None:
            mha(prev)


# --------------------------------------------------------------------------- the model
class HFBertLayer(nn.Module):
    """HF BertLayer written out (post-LN), parameters stored with canonical names."""

    def __init__(self, H, NH, I, eps, act, dtype):
        super().__init__()
        self.H, self.NH, self.D, self.eps, self.act = H, NH, H // NH, eps, _act_call(act)

        def p(*shape):
            return nn.Parameter(torch.zeros(*shape, dtype=dtype), requires_grad=False)

        self.wq, self.bq, self.wk, self.bk, self.wv, self.bv = p(H, H), p(H), p(H, H), p(H), p(H, H), p(H)
        self.wo, self.bo, self.ln1_w, self.ln1_b = p(H, H), p(H), p(H), p(H)
        self.w1, self.b1, self.w2, self.b2 = p(I, H), p(I), p(H, I), p(H)
        self.ln2_w, self.ln2_b = p(H), p(H)

    def load(self, get, prefix):
        m = {"wq": "attention.self.query.weight", "bq": "attention.self.query.bias",
             "wk": "attention.self.key.weight", "bk": "attention.self.key.bias",
             "wv": "attention.self.value.weight", "bv": "attention.self.value.bias",
             "wo": "attention.output.dense.weight", "bo": "attention.output.dense.bias",
             "ln1_w": "attention.output.LayerNorm.weight", "ln1_b": "attention.output.LayerNorm.bias",
             "w1": "intermediate.dense.weight", "b1": "intermediate.dense.bias",
             "w2": "output.dense.weight", "b2": "output.dense.bias",
             "ln2_w": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias"}
        for attr, name in m.items():
            getattr(self, attr).data.copy_(get(prefix + name))

    def forward(self, x, ext_mask):
        B, T = x.shape[0], x.shape[1]
        H = self.H  # a Python int (not a traced size): F.layer_norm needs it for ONNX export

        def heads(t):
            return t.view(B, T, self.NH, self.D).transpose(1, 2)

        q = heads(F.linear(x, self.wq, self.bq))
        k = heads(F.linear(x, self.wk, self.bk))
        v = heads(F.linear(x, self.wv, self.bv))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.D) + ext_mask
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H)
        a = F.layer_norm(F.linear(ctx, self.wo, self.bo) + x, (H,), self.ln1_w, self.ln1_b, self.eps)
        h = self.act(F.linear(a, self.w1, self.b1))
        return F.layer_norm(F.linear(h, self.w2, self.b2) + a, (H,), self.ln2_w, self.ln2_b, self.eps)


class BertRef(nn.Module):
    def __init__(self, cfg: dict, weights: dict, dtype=torch.float64, impl: str = "tel"):
        super().__init__()
        self.cfg, self.dtype, self.impl = cfg, dtype, impl
        self.heads = detect_heads(cfg, weights)
        H, NH, I = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
        L, eps = cfg["num_hidden_layers"], float(cfg.get("layer_norm_eps", 1e-12))
        self.H, self.eps = H, eps
        act = activation_fn(cfg.get("hidden_act", "gelu"))
        self.act = _act_call(act)
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")

        def get(name):
            if name not in weights:
                raise KeyError(f"checkpoint lacks {name}")
            arr = weights[name].to_float64() if dtype == torch.float64 else weights[name].to_float32()
            return torch.from_numpy(np.ascontiguousarray(arr)).to(dtype)

        def fixed(name):  # plain (non-trainable) parameter
            return nn.Parameter(get(name), requires_grad=False)

        self.word = fixed("embeddings.word_embeddings.weight")
        self.pos = fixed("embeddings.position_embeddings.weight")
        self.tok = fixed("embeddings.token_type_embeddings.weight")
        self.emb_ln_w, self.emb_ln_b = fixed("embeddings.LayerNorm.weight"), fixed("embeddings.LayerNorm.bias")
        self.layers = nn.ModuleList()
        for i in range(L):
            p = f"encoder.layer.{i}."
            if impl == "tel":
                layer = nn.TransformerEncoderLayer(d_model=H, nhead=NH, dim_feedforward=I, dropout=0.0,
                                                   activation=act if isinstance(act, str) else act,
                                                   layer_norm_eps=eps, batch_first=True, norm_first=False,
                                                   dtype=dtype)
                sd = {
                    "self_attn.in_proj_weight": torch.cat([get(p + f"attention.self.{n}.weight")
                                                           for n in ("query", "key", "value")], 0),
                    "self_attn.in_proj_bias": torch.cat([get(p + f"attention.self.{n}.bias")
                                                         for n in ("query", "key", "value")], 0),
                    "self_attn.out_proj.weight": get(p + "attention.output.dense.weight"),
                    "self_attn.out_proj.bias": get(p + "attention.output.dense.bias"),
                    "linear1.weight": get(p + "intermediate.dense.weight"),
                    "linear1.bias": get(p + "intermediate.dense.bias"),
                    "linear2.weight": get(p + "output.dense.weight"),
                    "linear2.bias": get(p + "output.dense.bias"),
                    "norm1.weight": get(p + "attention.output.LayerNorm.weight"),
                    "norm1.bias": get(p + "attention.output.LayerNorm.bias"),
                    "norm2.weight": get(p + "output.LayerNorm.weight"),
                    "norm2.bias": get(p + "output.LayerNorm.bias"),
                }
                layer.load_state_dict(sd, strict=True)
                for prm in layer.parameters():
                    prm.requires_grad_(True)  # keeps the fast path off (see module docstring)
            elif impl == "hf":
                layer = HFBertLayer(H, NH, I, eps, act, dtype)
                layer.load(get, p)
            else:
                raise ValueError(impl)
            self.layers.append(layer)
        h = self.heads
        if h["pooler"]:
            self.pool_w, self.pool_b = fixed("pooler.dense.weight"), fixed("pooler.dense.bias")
        if h["mlm"]:
            self.mlm_w, self.mlm_b = fixed("cls.predictions.transform.dense.weight"), fixed(
                "cls.predictions.transform.dense.bias")
            self.mlm_ln_w = fixed("cls.predictions.transform.LayerNorm.weight")
            self.mlm_ln_b = fixed("cls.predictions.transform.LayerNorm.bias")
            self.mlm_bias = fixed("cls.predictions.bias")
        if h["nsp"]:
            self.nsp_w, self.nsp_b = fixed("cls.seq_relationship.weight"), fixed("cls.seq_relationship.bias")
        if h["qa"]:
            self.qa_w, self.qa_b = fixed("qa_outputs.weight"), fixed("qa_outputs.bias")
        if h["seqcls"] or h["tokcls"]:
            self.cls_w, self.cls_b = fixed("classifier.weight"), fixed("classifier.bias")
        self.eval()

    @classmethod
    def from_pretrained(cls, model_dir: str, dtype=torch.float64, impl: str = "tel"):
        cfg, weights = load_checkpoint(model_dir)
        return cls(cfg, weights, dtype, impl)

    # -- pieces ------------------------------------------------------------------------------
    def embed(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        if T > self.pos.shape[0]:
            raise ValueError(f"sequence length {T} > max_position_embeddings {self.pos.shape[0]}")
        pos = torch.arange(T, device=input_ids.device)
        x = F.embedding(input_ids, self.word) + F.embedding(token_type_ids, self.tok) + self.pos[pos].unsqueeze(0)
        return F.layer_norm(x, (self.H,), self.emb_ln_w, self.emb_ln_b, self.eps)

    def encoder(self, x, attention_mask):
        if self.impl == "tel":
            pad = attention_mask == 0  # True = ignore this key
            with no_transformer_fast_path(), torch.enable_grad():
                for layer in self.layers:
                    x = layer(x, src_key_padding_mask=pad)
            return x.detach()
        ext = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, ext)
        return x

    def pooler(self, h):
        return torch.tanh(F.linear(h[:, 0], self.pool_w, self.pool_b))

    def encode(self, input_ids, attention_mask, token_type_ids):
        """(last_hidden_state, pooler_output) — the BertModel outputs (used for ONNX export)."""
        h = self.encoder(self.embed(input_ids, token_type_ids), attention_mask)
        return h, self.pooler(h)

    def forward(self, input_ids, token_type_ids=None, attention_mask=None) -> dict:
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        h = self.encoder(self.embed(input_ids, token_type_ids), attention_mask)
        out = {"last_hidden_state": h}
        hd = self.heads
        pooled = None
        if hd["pooler"]:
            pooled = out["pooler_output"] = self.pooler(h)
        if hd["mlm"]:
            t = self.act(F.linear(h, self.mlm_w, self.mlm_b))
            t = F.layer_norm(t, (self.H,), self.mlm_ln_w, self.mlm_ln_b, self.eps)
            out["mlm_logits"] = F.linear(t, self.word, self.mlm_bias)  # decoder tied to word embeddings
        if hd["nsp"]:
            out["nsp_logits"] = F.linear(pooled, self.nsp_w, self.nsp_b)
        if hd["qa"]:
            qa = F.linear(h, self.qa_w, self.qa_b)
            out["qa_start_logits"], out["qa_end_logits"] = qa[..., 0].contiguous(), qa[..., 1].contiguous()
        if hd["seqcls"]:
            out["seqcls_logits"] = F.linear(pooled, self.cls_w, self.cls_b)
        if hd["tokcls"]:
            out["tokcls_logits"] = F.linear(h, self.cls_w, self.cls_b)
        return out


# --------------------------------------------------------------------------- training reference
def hf_param_order(cfg: dict, heads: "tuple[str, ...]" = ("pooler", "mlm", "nsp")) -> "list[str]":
    """HF parameter names in state-dict order (BertForPreTraining for the default heads)."""
    names = ["bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
             "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
             "bert.embeddings.LayerNorm.bias"]
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        for n in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                  "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"):
            names += [p + n + ".weight", p + n + ".bias"]
    if "pooler" in heads:
        names += ["bert.pooler.dense.weight", "bert.pooler.dense.bias"]
    if "mlm" in heads:
        names += ["cls.predictions.bias", "cls.predictions.transform.dense.weight",
                  "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.weight",
                  "cls.predictions.transform.LayerNorm.bias"]
    if "nsp" in heads:
        names += ["cls.seq_relationship.weight", "cls.seq_relationship.bias"]
    return names


class BertPretrainRef(nn.Module):
    """Trainable BertForPreTraining written out the way HF modeling_bert.py computes it (dropout
    off), for the training parity test (train_parity.py).  Parameters are nn.Parameters kept under
    their HF names in `self.hf` (registered with '.' -> '__'); the MLM decoder is the word
    embedding Parameter itself (tied: both uses add to one gradient), and the word embedding has
    padding_idx = pad_token_id (the padding row gets no gradient from the lookup), as in HF.

    pretraining_loss(): DLE's BertPretrainingCriterion: CrossEntropyLoss(ignore_index=-1) over the
    MLM scores of EVERY position (labels -1 except at masked positions) plus CrossEntropyLoss on NSP.
    """

    def __init__(self, cfg: dict, weights: dict, dtype=torch.float32):
        super().__init__()
        self.cfg, self.dtype = cfg, dtype
        self.H, self.NH = cfg["hidden_size"], cfg["num_attention_heads"]
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.pad = int(cfg.get("pad_token_id", 0))
        self.act = _act_call(activation_fn(cfg.get("hidden_act", "gelu")))
        self.hf = {}
        for name in hf_param_order(cfg):
            canon = normalize_name(name)
            if canon not in weights:
                raise KeyError(f"checkpoint lacks {name}")
            arr = weights[canon].to_float64() if dtype == torch.float64 else weights[canon].to_float32()
            prm = nn.Parameter(torch.from_numpy(np.ascontiguousarray(arr)).to(dtype))
            self.register_parameter(name.replace(".", "__"), prm)
            self.hf[name] = prm

    def no_decay(self, name: str) -> bool:
        return any(s in name for s in ("bias", "LayerNorm", "gamma", "beta"))

    def _layer(self, x, ext, p):
        P, B, T, H, NH = self.hf, x.shape[0], x.shape[1], self.H, self.NH
        D = H // NH

        def lin(t, n):
            return F.linear(t, P[p + n + ".weight"], P[p + n + ".bias"])

        def heads(t):
            return t.view(B, T, NH, D).transpose(1, 2)

        q, k, v = (heads(lin(x, "attention.self." + n)) for n in ("query", "key", "value"))
        probs = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D) + ext, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(B, T, H)
        a = F.layer_norm(lin(ctx, "attention.output.dense") + x, (H,), P[p + "attention.output.LayerNorm.weight"],
                         P[p + "attention.output.LayerNorm.bias"], self.eps)
        h = self.act(lin(a, "intermediate.dense"))
        return F.layer_norm(lin(h, "output.dense") + a, (H,), P[p + "output.LayerNorm.weight"],
                            P[p + "output.LayerNorm.bias"], self.eps)

    def encode(self, input_ids, token_type_ids, attention_mask):
        P, T = self.hf, input_ids.shape[1]
        x = (F.embedding(input_ids, P["bert.embeddings.word_embeddings.weight"], padding_idx=self.pad)
             + F.embedding(token_type_ids, P["bert.embeddings.token_type_embeddings.weight"])
             + P["bert.embeddings.position_embeddings.weight"][:T].unsqueeze(0))
        x = F.layer_norm(x, (self.H,), P["bert.embeddings.LayerNorm.weight"], P["bert.embeddings.LayerNorm.bias"],
                         self.eps)
        ext = (1.0 - attention_mask.to(self.dtype))[:, None, None, :] * torch.finfo(self.dtype).min
        for i in range(self.cfg["num_hidden_layers"]):
            x = self._layer(x, ext, f"bert.encoder.layer.{i}.")
        return x

    def pretraining_loss(self, input_ids, token_type_ids, attention_mask, masked_lm_labels, next_sentence_labels):
        """-> (loss, mlm_loss, nsp_loss); masked_lm_labels [B, T] with -1 = not predicted."""
        P = self.hf
        h = self.encode(input_ids, token_type_ids, attention_mask)
        pooled = torch.tanh(F.linear(h[:, 0], P["bert.pooler.dense.weight"], P["bert.pooler.dense.bias"]))
        t = self.act(F.linear(h, P["cls.predictions.transform.dense.weight"], P["cls.predictions.transform.dense.bias"]))
        t = F.layer_norm(t, (self.H,), P["cls.predictions.transform.LayerNorm.weight"],
                         P["cls.predictions.transform.LayerNorm.bias"], self.eps)
        scores = F.linear(t, P["bert.embeddings.word_embeddings.weight"], P["cls.predictions.bias"])
        mlm = F.cross_entropy(scores.reshape(-1, scores.shape[-1]), masked_lm_labels.reshape(-1), ignore_index=-1)
        nsp_scores = F.linear(pooled, P["cls.seq_relationship.weight"], P["cls.seq_relationship.bias"])
        nsp = F.cross_entropy(nsp_scores, next_sentence_labels.reshape(-1), ignore_index=-1)
        return mlm + nsp, mlm, nsp


def dle_mlm_labels(masked_lm_positions: np.ndarray, masked_lm_ids: np.ndarray, seq_len: int) -> np.ndarray:
    """DLE's pretraining_dataset: labels [B, T] of -1, masked_lm_ids scattered at the positions
    before the first position 0 (the number of real predictions)."""
    B = masked_lm_positions.shape[0]
    labels = np.full((B, seq_len), -1, dtype=np.int64)
    for b in range(B):
        pos = masked_lm_positions[b]
        zeros = np.nonzero(pos == 0)[0]
        n = int(zeros[0]) if len(zeros) else len(pos)
        labels[b, pos[:n]] = masked_lm_ids[b, :n]
    return labels


def run_reference(model, input_ids, token_type_ids=None, attention_mask=None) -> "dict[str, np.ndarray]":
    """numpy in ([B,T] or [T] int arrays) -> numpy out (same leading shape)."""
    ids = np.asarray(input_ids, dtype=np.int64)
    squeeze = ids.ndim == 1
    if squeeze:
        ids = ids[None]

    def prep(a):
        if a is None:
            return None
        a = np.asarray(a, dtype=np.int64)
        return torch.from_numpy(a[None] if squeeze else a)

    V = model.word.shape[0]
    if ids.min() < 0 or ids.max() >= V:
        raise ValueError(f"input id out of range [0,{V})")
    with torch.no_grad():
        out = model(torch.from_numpy(ids), prep(token_type_ids), prep(attention_mask))
    res = {k: v.detach().cpu().numpy() for k, v in out.items()}
    if squeeze:
        res = {k: v[0] for k, v in res.items()}
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input-ids", required=True)
    ap.add_argument("--token-type-ids")
    ap.add_argument("--attention-mask")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--impl", choices=["tel", "hf"], default="tel")
    a = ap.parse_args(argv)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model = BertRef.from_pretrained(a.model, dtype, a.impl)
    load = (lambda p: np.load(p) if p else None)
    res = run_reference(model, np.load(a.input_ids), load(a.token_type_ids), load(a.attention_mask))
    os.makedirs(a.out, exist_ok=True)
    for k, v in res.items():
        np.save(os.path.join(a.out, k + ".npy"), v)
        print(f"{k}: {list(v.shape)} {v.dtype}")


if __name__ == "__main__":
    main()
