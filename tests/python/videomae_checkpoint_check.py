#!/usr/bin/python3
"""VideoMAE checkpoint conversion checks against PyTorch-written files (Debian's torch 1.13).

Two modes:

  check (default)   builds random tiny-config state dicts in the layouts real checkpoints use:
                      * VideoMAE v1 pretraining   torch.save({'model': sd, 'epoch', 'args'})  (encoder.*, decoder.*)
                      * VideoMAE v1 fine-tuned    torch.save({'module': sd})                   (blocks.*, fc_norm, head)
                      * V-SWIFT pretraining       pos_embed buffers (fixed sinusoid tables) in the state dict
                      * fp16 / bf16 / DDP-prefixed (module.*) variants
                      * HF VideoMAEForPreTraining / ForVideoClassification safetensors (+ HF config.json)
                    runs `unmask convert-videomae` orig -> hf -> orig (and hf -> orig -> hf) and compares every
                    tensor BIT-EXACTLY with this script's own numpy split / fuse of the fused qkv, written from
                    the key map in /work/shared/reference/video.md 1.8-1.9 (not from unmask's C++). Also checks
                    config.json (HF fields, layer_norm_eps 1e-6, the unmask block) and the error paths.
  fixtures DIR      writes the .pth files tests/test_torch_pickle.cc reads (dtypes, views, shared storages,
                    nested dicts with Namespace args, {'module': ...}, a legacy-format file, a deflated zip, a
                    tiny VideoMAE pretraining checkpoint) with the expected values as <stem>.expect.safetensors.

Usage: /usr/bin/python3 tests/python/videomae_checkpoint_check.py --unmask build/unmask
Exit status 0 when everything matches.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

# VideoMAEConfig::tiny() (include/unmask/videomae.h).
TINY = dict(img=32, frames=4, tubelet=2, patch=16, dim=64, depth=2, heads=2, ddim=32, ddepth=1, dheads=2, mlp=4)
TOKENS = (TINY["frames"] // TINY["tubelet"]) * (TINY["img"] // TINY["patch"]) ** 2
PATCH_DIM = 3 * TINY["tubelet"] * TINY["patch"] ** 2


# ---- state dicts in the original layout ---------------------------------------------------------

def block(rng, prefix, d):
    h = d * TINY["mlp"]
    shapes = [("norm1.weight", [d]), ("norm1.bias", [d]), ("attn.q_bias", [d]), ("attn.v_bias", [d]),
              ("attn.qkv.weight", [3 * d, d]), ("attn.proj.weight", [d, d]), ("attn.proj.bias", [d]),
              ("norm2.weight", [d]), ("norm2.bias", [d]), ("mlp.fc1.weight", [h, d]), ("mlp.fc1.bias", [h]),
              ("mlp.fc2.weight", [d, h]), ("mlp.fc2.bias", [d])]
    return [(prefix + n, rng.standard_normal(s).astype(np.float32)) for n, s in shapes]


def sinusoid(n, d):
    pos = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(d)
    angle = pos / np.power(10000.0, 2.0 * (j // 2) / d)
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return table[None].astype(np.float32)


def original_pretrain(rng, vswift=False):
    c = TINY
    sd = collections.OrderedDict()
    sd["encoder.patch_embed.proj.weight"] = rng.standard_normal([c["dim"], 3, c["tubelet"], c["patch"], c["patch"]]).astype(np.float32)
    sd["encoder.patch_embed.proj.bias"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    if vswift:  # V-SWIFT registers the fixed tables as buffers
        sd["encoder.pos_embed"] = sinusoid(TOKENS, c["dim"])
    for i in range(c["depth"]):
        sd.update(block(rng, f"encoder.blocks.{i}.", c["dim"]))
    sd["encoder.norm.weight"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    sd["encoder.norm.bias"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    sd["encoder_to_decoder.weight"] = rng.standard_normal([c["ddim"], c["dim"]]).astype(np.float32)
    sd["mask_token"] = rng.standard_normal([1, 1, c["ddim"]]).astype(np.float32)
    if vswift:
        sd["decoder.pos_embed"] = sinusoid(TOKENS, c["ddim"])
    for i in range(c["ddepth"]):
        sd.update(block(rng, f"decoder.blocks.{i}.", c["ddim"]))
    sd["decoder.norm.weight"] = rng.standard_normal([c["ddim"]]).astype(np.float32)
    sd["decoder.norm.bias"] = rng.standard_normal([c["ddim"]]).astype(np.float32)
    sd["decoder.head.weight"] = rng.standard_normal([PATCH_DIM, c["ddim"]]).astype(np.float32)
    sd["decoder.head.bias"] = rng.standard_normal([PATCH_DIM]).astype(np.float32)
    return sd


def original_finetune(rng, classes):
    c = TINY
    sd = collections.OrderedDict()
    sd["patch_embed.proj.weight"] = rng.standard_normal([c["dim"], 3, c["tubelet"], c["patch"], c["patch"]]).astype(np.float32)
    sd["patch_embed.proj.bias"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    for i in range(c["depth"]):
        sd.update(block(rng, f"blocks.{i}.", c["dim"]))
    sd["fc_norm.weight"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    sd["fc_norm.bias"] = rng.standard_normal([c["dim"]]).astype(np.float32)
    sd["head.weight"] = rng.standard_normal([classes, c["dim"]]).astype(np.float32)
    sd["head.bias"] = rng.standard_normal([classes]).astype(np.float32)
    return sd


# ---- this script's own name map (video.md 1.8 / 1.9) --------------------------------------------

BLOCK_MAP = {
    "norm1.weight": "layernorm_before.weight", "norm1.bias": "layernorm_before.bias",
    "attn.q_bias": "attention.attention.q_bias", "attn.v_bias": "attention.attention.v_bias",
    "attn.proj.weight": "attention.output.dense.weight", "attn.proj.bias": "attention.output.dense.bias",
    "norm2.weight": "layernorm_after.weight", "norm2.bias": "layernorm_after.bias",
    "mlp.fc1.weight": "intermediate.dense.weight", "mlp.fc1.bias": "intermediate.dense.bias",
    "mlp.fc2.weight": "output.dense.weight", "mlp.fc2.bias": "output.dense.bias",
}
TOP_MAP = {
    "patch_embed.proj.weight": "videomae.embeddings.patch_embeddings.projection.weight",
    "patch_embed.proj.bias": "videomae.embeddings.patch_embeddings.projection.bias",
    "norm.weight": "videomae.layernorm.weight", "norm.bias": "videomae.layernorm.bias",
    "head.weight": "classifier.weight", "head.bias": "classifier.bias",
}


def orig_to_hf(sd):
    out = collections.OrderedDict()
    for name, v in sd.items():
        if name.endswith("pos_embed"):
            continue  # HF recomputes the fixed table
        m = re.fullmatch(r"(encoder\.)?blocks\.(\d+)\.(.*)", name) or re.fullmatch(r"(decoder\.)blocks\.(\d+)\.(.*)", name)
        if m:
            base = ("decoder.decoder_layers." if m.group(1) == "decoder." else "videomae.encoder.layer.") + m.group(2) + "."
            rest = m.group(3)
            if rest == "attn.qkv.weight":
                a = v.shape[0] // 3
                for k, part in enumerate(("query", "key", "value")):
                    out[base + f"attention.attention.{part}.weight"] = v[k * a:(k + 1) * a].copy()
            else:
                out[base + BLOCK_MAP[rest]] = v
            continue
        short = name[len("encoder."):] if name.startswith("encoder.") else name
        out[TOP_MAP.get(short, name)] = v
    return out


def hf_to_orig(hf, pretrain):
    enc = "encoder." if pretrain else ""
    inv_block = {v: k for k, v in BLOCK_MAP.items()}
    inv_top = {v: k for k, v in TOP_MAP.items()}
    out = collections.OrderedDict()
    qkv = {}
    for name, v in hf.items():
        m = re.fullmatch(r"videomae\.encoder\.layer\.(\d+)\.(.*)", name) or re.fullmatch(r"decoder\.decoder_layers\.(\d+)\.(.*)", name)
        if m:
            base = (enc if name.startswith("videomae.") else "decoder.") + "blocks." + m.group(1) + "."
            rest = m.group(2)
            pm = re.fullmatch(r"attention\.attention\.(query|key|value)\.weight", rest)
            if pm:
                qkv.setdefault(base, {})[pm.group(1)] = v
                continue
            out[base + inv_block[rest]] = v
            continue
        if name in inv_top:
            short = inv_top[name]
            out[(enc if short in ("patch_embed.proj.weight", "patch_embed.proj.bias", "norm.weight", "norm.bias") else "") + short] = v
        else:
            out[name] = v
    for base, parts in qkv.items():
        out[base + "attn.qkv.weight"] = np.concatenate([parts["query"], parts["key"], parts["value"]], axis=0)
    return out


def hf_config(classes=0, eps=1e-12):
    c = TINY
    j = {"architectures": ["VideoMAEForVideoClassification" if classes else "VideoMAEForPreTraining"],
         "model_type": "videomae", "image_size": c["img"], "patch_size": c["patch"], "num_channels": 3,
         "num_frames": c["frames"], "tubelet_size": c["tubelet"], "hidden_size": c["dim"],
         "num_hidden_layers": c["depth"], "num_attention_heads": c["heads"], "intermediate_size": c["dim"] * c["mlp"],
         "hidden_act": "gelu", "layer_norm_eps": eps, "qkv_bias": True, "use_mean_pooling": bool(classes),
         "decoder_num_attention_heads": c["dheads"], "decoder_hidden_size": c["ddim"],
         "decoder_num_hidden_layers": c["ddepth"], "decoder_intermediate_size": c["ddim"] * c["mlp"],
         "norm_pix_loss": True}
    if classes:
        j["id2label"] = {str(k): f"class{k}" for k in range(classes)}
        j["label2id"] = {f"class{k}": k for k in range(classes)}
    return j


# ---- files -----------------------------------------------------------------------------------------

def save_pth(path, sd, wrapper=None, dtype=torch.float32, prefix=""):
    tensors = collections.OrderedDict((prefix + k, torch.from_numpy(v).to(dtype)) for k, v in sd.items())
    obj = tensors if wrapper is None else {wrapper: tensors, "epoch": 3,
                                           "args": argparse.Namespace(model="vit_tiny", lr=1.5e-4, batch_size=4)}
    torch.save(obj, path)


def save_st_dir(d, sd, config):
    os.makedirs(d, exist_ok=True)
    st_io.write_safetensors(os.path.join(d, "model.safetensors"),
                            {k: st_io.RawTensor("F32", v.shape, v) for k, v in sd.items()})
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=2)


def read_dir(d):
    return {k: v.to_float32() for k, v in st_io.read_model_dir(d).items()}


class Checker:
    def __init__(self, unmask):
        self.unmask = unmask
        self.failures = 0
        self.checks = 0

    def fail(self, msg):
        self.failures += 1
        print("FAIL:", msg)

    def run(self, *args, ok=True):
        p = subprocess.run([self.unmask, "convert-videomae", *args], capture_output=True, text=True)
        self.checks += 1
        if ok and p.returncode != 0:
            self.fail(f"convert-videomae {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        if not ok and p.returncode == 0:
            self.fail(f"convert-videomae {' '.join(args)} succeeded but should fail")
        return p

    def same(self, label, got, want):
        """Same names, shapes and bits."""
        self.checks += 1
        if set(got) != set(want):
            self.fail(f"{label}: names differ: only in output {sorted(set(got) - set(want))[:6]}, "
                      f"missing {sorted(set(want) - set(got))[:6]}")
            return
        for name, w in want.items():
            g = got[name]
            w = np.ascontiguousarray(w, dtype=np.float32)
            if g.shape != w.shape:
                self.fail(f"{label}: {name} shape {g.shape} != {w.shape}")
            elif not np.array_equal(g.view(np.uint32), w.view(np.uint32)):
                self.fail(f"{label}: {name} differs (max abs {np.max(np.abs(g - w))})")
        print(f"  ok  {label}: {len(want)} tensors bit-exact")

    def config(self, label, d, classes, pretrain, hf=True):
        with open(os.path.join(d, "config.json")) as f:
            j = json.load(f)
        self.checks += 1
        # Only Hugging Face names may claim a transformers model; the original layout says what it is.
        if not hf:
            if "model_type" in j or "architectures" in j or "convert-videomae" not in j.get("note", ""):
                self.fail(f"{label}: an original-names config.json claims model_type/architectures or lacks the note")
            j = dict(j, model_type="videomae")
        want = {"model_type": "videomae", "hidden_size": TINY["dim"], "num_hidden_layers": TINY["depth"],
                "num_attention_heads": TINY["heads"], "intermediate_size": TINY["dim"] * 4, "image_size": TINY["img"],
                "num_frames": TINY["frames"], "tubelet_size": TINY["tubelet"], "patch_size": TINY["patch"],
                "layer_norm_eps": 1e-6, "qkv_bias": True, "use_mean_pooling": not pretrain,
                "decoder_hidden_size": TINY["ddim"], "decoder_num_hidden_layers": TINY["ddepth"],
                "decoder_num_attention_heads": TINY["dheads"], "norm_pix_loss": True}
        for k, v in want.items():
            if j.get(k) != v:
                self.fail(f"{label}: config.json {k} = {j.get(k)!r}, expected {v!r}")
        arch = "VideoMAEForVideoClassification" if classes else "VideoMAEForPreTraining" if pretrain else "VideoMAEModel"
        if hf and j.get("architectures") != [arch]:
            self.fail(f"{label}: architectures {j.get('architectures')}, expected [{arch}]")
        if classes and (j.get("num_labels") != classes or len(j.get("id2label", {})) != classes):
            self.fail(f"{label}: num_labels / id2label do not give {classes} classes")
        u = j.get("unmask", {})
        if u.get("dim") != TINY["dim"] or u.get("heads") != TINY["heads"] or u.get("mlp_ratio") != 4.0:
            self.fail(f"{label}: the unmask block is wrong: {u}")


def check(unmask):
    ck = Checker(unmask)
    rng = np.random.default_rng(20240611)
    with tempfile.TemporaryDirectory() as tmp:
        P = lambda *a: os.path.join(tmp, *a)  # noqa: E731
        # 1. v1 pretraining checkpoint, {'model': sd} + epoch + args.
        pt = original_pretrain(rng)
        save_pth(P("v1_pt.pth"), pt, "model")
        ck.run("--in", P("v1_pt.pth"), "--output", P("v1_pt_hf"), "--to", "hf", "--config", "tiny")
        ck.same("v1 pretrain .pth -> hf", read_dir(P("v1_pt_hf")), orig_to_hf(pt))
        ck.config("v1 pretrain -> hf", P("v1_pt_hf"), 0, True)
        ck.run("--in", P("v1_pt_hf"), "--output", P("v1_pt_back"), "--to", "original")  # config from-file
        ck.same("v1 pretrain hf -> original", read_dir(P("v1_pt_back")), pt)
        ck.run("--in", P("v1_pt.pth"), "--output", P("v1_pt_orig"), "--to", "original", "--config", "tiny")
        ck.same("v1 pretrain .pth -> original", read_dir(P("v1_pt_orig")), pt)

        # 2. v1 fine-tuned checkpoint (DeepSpeed {'module': sd}), 5 classes.
        ft = original_finetune(rng, 5)
        save_pth(P("v1_ft.pth"), ft, "module")
        ck.run("--in", P("v1_ft.pth"), "--output", P("v1_ft_hf"), "--to", "hf", "--config", "tiny")
        ck.same("v1 fine-tune .pth -> hf", read_dir(P("v1_ft_hf")), orig_to_hf(ft))
        ck.config("v1 fine-tune -> hf", P("v1_ft_hf"), 5, False)
        ck.run("--in", P("v1_ft_hf"), "--output", P("v1_ft_back"), "--to", "original")
        ck.same("v1 fine-tune hf -> original", read_dir(P("v1_ft_back")), ft)

        # 3. V-SWIFT: pos_embed buffers (fixed sinusoid) in the state dict.
        vs = original_pretrain(rng, vswift=True)
        save_pth(P("vswift.pth"), vs, "model")
        p = ck.run("--in", P("vswift.pth"), "--output", P("vswift_hf"), "--to", "hf", "--config", "tiny")
        ck.same("V-SWIFT .pth -> hf (tables dropped)", read_dir(P("vswift_hf")), orig_to_hf(vs))
        if "pos_embed" not in p.stdout:
            ck.fail("V-SWIFT -> hf did not report the dropped pos_embed tables")
        ck.run("--in", P("vswift.pth"), "--output", P("vswift_orig"), "--to", "original", "--config", "tiny")
        ck.same("V-SWIFT .pth -> original (tables kept)", read_dir(P("vswift_orig")), vs)
        learned = collections.OrderedDict(vs)
        learned["encoder.pos_embed"] = learned["encoder.pos_embed"] + np.float32(0.25)
        save_pth(P("learned.pth"), learned, "model")
        p = ck.run("--in", P("learned.pth"), "--output", P("learned_hf"), "--to", "hf", "--config", "tiny", ok=False)
        if "learned" not in p.stderr:
            ck.fail(f"a learned pos_embed -> hf: the error does not say 'learned': {p.stderr.strip()}")

        # 4. Half precision and DDP prefixes: fp16 {'model': ...}, bf16 plain sd with module.* names.
        save_pth(P("fp16.pth"), pt, "model", dtype=torch.float16)
        ck.run("--in", P("fp16.pth"), "--output", P("fp16_hf"), "--to", "hf", "--config", "tiny")
        pt16 = collections.OrderedDict((k, v.astype(np.float16).astype(np.float32)) for k, v in pt.items())
        ck.same("fp16 .pth -> hf", read_dir(P("fp16_hf")), orig_to_hf(pt16))
        save_pth(P("vswift16.pth"), vs, "model", dtype=torch.bfloat16)  # tables rounded to bf16: still fixed
        ck.run("--in", P("vswift16.pth"), "--output", P("vswift16_hf"), "--to", "hf", "--config", "tiny")
        vsbf = collections.OrderedDict((k, torch.from_numpy(v).bfloat16().float().numpy()) for k, v in vs.items())
        ck.same("bf16 V-SWIFT .pth -> hf (tables dropped)", read_dir(P("vswift16_hf")), orig_to_hf(vsbf))
        save_pth(P("bf16.pth"), ft, None, dtype=torch.bfloat16, prefix="module.")
        ck.run("--in", P("bf16.pth"), "--output", P("bf16_orig"), "--to", "original", "--config", "tiny")
        ftbf = collections.OrderedDict(
            (k, torch.from_numpy(v).bfloat16().float().numpy()) for k, v in ft.items())
        ck.same("bf16 module.* .pth -> original", read_dir(P("bf16_orig")), ftbf)

        # 5. HF VideoMAEForPreTraining directory with HF's config (layer_norm_eps 1e-12).
        hf_pt = orig_to_hf(original_pretrain(rng))
        save_st_dir(P("hf_pt"), hf_pt, hf_config())
        p = ck.run("--in", P("hf_pt"), "--output", P("hf_pt_orig"), "--to", "original")
        ck.same("HF pretrain dir -> original", read_dir(P("hf_pt_orig")), hf_to_orig(hf_pt, True))
        if "1e-6" not in p.stdout and "1e-06" not in p.stdout:
            ck.fail("HF config with layer_norm_eps 1e-12: no note about the eps divergence")
        ck.config("HF pretrain -> original", P("hf_pt_orig"), 0, True, hf=False)
        ck.run("--in", P("hf_pt_orig"), "--output", P("hf_pt_back"), "--to", "hf")
        ck.same("HF pretrain -> original -> hf", read_dir(P("hf_pt_back")), hf_pt)

        # 6. HF VideoMAEForVideoClassification as a bare .safetensors file (no config: --config tiny).
        hf_ft = orig_to_hf(original_finetune(rng, 3))
        save_st_dir(P("hf_ft"), hf_ft, None)
        ck.run("--in", P("hf_ft", "model.safetensors"), "--output", P("hf_ft_orig"), "--to", "original", "--config", "tiny")
        ck.same("HF classifier file -> original", read_dir(P("hf_ft_orig")), hf_to_orig(hf_ft, False))
        ck.config("HF classifier -> original", P("hf_ft_orig"), 3, False, hf=False)
        ck.run("--in", P("hf_ft_orig"), "--output", P("hf_ft_back"), "--to", "hf")
        ck.same("HF classifier -> original -> hf", read_dir(P("hf_ft_back")), hf_ft)

        # 7. q_bias missing (never a silent zero) and a wrong config are errors.
        nobias = collections.OrderedDict((k, v) for k, v in pt.items() if not k.endswith("blocks.1.attn.q_bias"))
        save_pth(P("nobias.pth"), nobias, "model")
        for to in ("hf", "original"):
            p = ck.run("--in", P("nobias.pth"), "--output", P("nobias_" + to), "--to", to, "--config", "tiny", ok=False)
            if "q_bias" not in p.stderr:
                ck.fail(f"missing q_bias -> {to}: the error does not name q_bias: {p.stderr.strip()}")
        p = ck.run("--in", P("v1_pt.pth"), "--output", P("wrong"), "--to", "hf", "--config", "small", ok=False)
        if "config" not in p.stderr:
            ck.fail(f"tiny weights with --config small: unclear error: {p.stderr.strip()}")
    print(f"videomae checkpoints: {ck.checks} checks, {ck.failures} failure(s)")
    return 1 if ck.failures else 0


# ---- fixtures for tests/test_torch_pickle.cc ------------------------------------------------------------

def fixtures(d):
    os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(7)

    def expect(path, named):
        out = {}
        for k, t in named.items():
            if t.dtype in (torch.int64,):
                out[k] = st_io.RawTensor("I64", t.shape, t.contiguous().numpy())
            else:
                out[k] = st_io.RawTensor("F32", t.shape, t.float().contiguous().numpy())
        st_io.write_safetensors(path, out)

    base = torch.randn(4, 6, generator=g)
    shared = torch.randn(2, 5, generator=g)
    sd = collections.OrderedDict()
    sd["f32"] = torch.randn(3, 4, generator=g)
    sd["f16"] = torch.randn(5, generator=g).half()
    sd["bf16"] = torch.randn(2, 3, generator=g).bfloat16()
    sd["f64"] = torch.randn(4, generator=g).double()
    sd["i64"] = torch.arange(-3, 4, dtype=torch.int64) * 1000000007
    sd["transposed"] = base.t()                  # general strides -> copied
    sd["slice"] = base[1:3, 2:5]                 # storage offset + strides
    sd["shared_a"] = shared[0]                   # two views of one storage
    sd["shared_b"] = shared[1]
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.zeros(0, 3)
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g))  # _rebuild_parameter
    sd["f16_view"] = torch.randn(3, 4, generator=g).half().t()
    torch.save(sd, os.path.join(d, "dtypes.pth"))
    expect(os.path.join(d, "dtypes.expect.safetensors"), {k: v.detach() for k, v in sd.items()})

    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(2, 3, generator=g))
        lin.bias.copy_(torch.randn(2, generator=g))
    nested = {"model": lin.state_dict(), "epoch": 3, "scaler": None,
              "args": argparse.Namespace(lr=1e-3, name="vit_b", sizes=[1, 2], pair=(1, "a")),
              "optimizer": {"state": {0: {"exp_avg": torch.ones(2, 3), "step": 5}},
                            "param_groups": [{"lr": 0.1, "params": [0, 1]}]}}
    torch.save(nested, os.path.join(d, "nested.pth"))
    expect(os.path.join(d, "nested.expect.safetensors"),
           {"model/weight": lin.weight.detach(), "model/bias": lin.bias.detach(),
            "optimizer/state/0/exp_avg": torch.ones(2, 3)})
    torch.save({"module": lin.state_dict()}, os.path.join(d, "module.pth"))
    torch.save(lin.state_dict(), os.path.join(d, "legacy.pth"), _use_new_zipfile_serialization=False)
    # The same archive re-zipped with deflate (as a zip tool would): not what torch.save writes.
    with zipfile.ZipFile(os.path.join(d, "nested.pth")) as src, \
            zipfile.ZipFile(os.path.join(d, "deflated.pth"), "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    # A tiny VideoMAE pretraining checkpoint (V-SWIFT style, with buffers) for the loader tests.
    rng = np.random.default_rng(11)
    pt = original_pretrain(rng, vswift=True)
    save_pth(os.path.join(d, "videomae_pt.pth"), pt, "model", dtype=torch.float16)
    expect(os.path.join(d, "videomae_pt.expect.safetensors"),
           {k: torch.from_numpy(v).half() for k, v in pt.items()})
    print(f"fixtures written to {d}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="check", choices=["check", "fixtures"])
    ap.add_argument("dir", nargs="?", help="fixtures: output directory")
    ap.add_argument("--unmask", default="build/unmask")
    a = ap.parse_args()
    if a.mode == "fixtures":
        if not a.dir:
            ap.error("fixtures needs a directory")
        return fixtures(a.dir)
    return check(a.unmask)


if __name__ == "__main__":
    sys.exit(main())
