#!/usr/bin/python3
"""VideoMAE pretraining parity: unmask's forward+backward against an independent PyTorch model.

The PyTorch model below is written from the VideoMAE spec (/work/shared/reference/video.md
section 1), not from unmask's C++: Conv3d tubelet embedding, fixed 1-D sinusoid positions,
pre-LN blocks (LayerNorm eps 1e-6, qkv Linear without bias + cat(q_bias, 0, v_bias), exact GELU,
mlp ratio 4), encoder on the visible tokens, encoder_to_decoder (no bias), mask token, decoder
over [visible + pos, mask_token + pos], norm + head on the last N_mask tokens, and the
normalized-pixel MSE (per-patch per-channel mean / unbiased std, eps after the sqrt, target from
the un-normalized clip, channel-fastest flattening).

`unmask videomae-step` builds a random tiny model (with perturbed biases / LayerNorm weights),
random clips and a tube mask, runs one step and writes inputs, params and grads as safetensors;
this script loads them into the PyTorch model, runs it in float64, and compares the loss and
every gradient (norm-relative error per tensor, tolerance 1e-5).

Usage: /usr/bin/python3 tests/python/videomae_parity.py --unmask build/unmask
Exit status 0 when everything matches.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# The tiny preset (VideoMAEConfig::tiny in include/unmask/videomae.h).
TINY = dict(img=32, frames=4, tubelet=2, patch=16, dim=64, depth=2, heads=2,
            ddim=32, ddepth=1, dheads=2, mlp_ratio=4.0, eps=1e-6)


def sinusoid_table(n: int, d: int) -> torch.Tensor:
    pos = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(d)[None, :]
    angle = pos / np.power(10000.0, 2 * (j // 2) / d)
    table = np.where(j % 2 == 0, np.sin(angle), np.cos(angle))
    return torch.from_numpy(table)


def block(x, p, prefix, heads, eps, drop=None):
    """VideoMAE Block: x + attn(norm1(x)); x + mlp(norm2(x)). drop: per-clip DropPath scales
    [2, B] (attention branch, MLP branch), each 0 or 1/keep, as timm's DropPath multiplies them."""
    sa = 1.0 if drop is None else drop[0][:, None, None]
    sm = 1.0 if drop is None else drop[1][:, None, None]
    B, N, C = x.shape
    h = F.layer_norm(x, (C,), p[prefix + "norm1.weight"], p[prefix + "norm1.bias"], eps)
    bias = torch.cat([p[prefix + "attn.q_bias"], torch.zeros_like(p[prefix + "attn.v_bias"]),
                      p[prefix + "attn.v_bias"]])
    qkv = F.linear(h, p[prefix + "attn.qkv.weight"], bias)
    qkv = qkv.reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    q = q * (C // heads) ** -0.5
    attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
    o = (attn @ v).transpose(1, 2).reshape(B, N, C)
    x = x + sa * F.linear(o, p[prefix + "attn.proj.weight"], p[prefix + "attn.proj.bias"])
    h = F.layer_norm(x, (C,), p[prefix + "norm2.weight"], p[prefix + "norm2.bias"], eps)
    h = F.gelu(F.linear(h, p[prefix + "mlp.fc1.weight"], p[prefix + "mlp.fc1.bias"]))
    return x + sm * F.linear(h, p[prefix + "mlp.fc2.weight"], p[prefix + "mlp.fc2.bias"])


def pretrain_loss(p, videos, mask, cfg, decode_mask=None):
    """decode_mask (VideoMAE v2 dual masking, True = not decoded): the decoder input is
    [x_vis + pos_vis, mask_token + pos[~decode_mask]], the head runs on those last tokens and the
    loss is the MSE over the decoded tokens that the encoder masked (v2 engine_for_pretraining:
    labels = patches[~decode_masked_pos], cal_loss_mask = bool_masked_pos[~decode_masked_pos])."""
    B = videos.shape[0]
    tt, ps, eps = cfg["tubelet"], cfg["patch"], cfg["eps"]
    # encoder: Conv3d tubelet embed -> (t h w) tokens, + sinusoid, keep the visible ones
    x = F.conv3d(videos, p["encoder.patch_embed.proj.weight"], p["encoder.patch_embed.proj.bias"],
                 stride=(tt, ps, ps))
    x = x.flatten(2).transpose(1, 2)  # [B, Np, D]
    Np, D = x.shape[1], x.shape[2]
    x = x + sinusoid_table(Np, D).to(x.dtype)[None]
    x_vis = x[~mask].reshape(B, -1, D)
    for i in range(cfg["depth"]):
        x_vis = block(x_vis, p, f"encoder.blocks.{i}.", cfg["heads"], eps)
    x_vis = F.layer_norm(x_vis, (D,), p["encoder.norm.weight"], p["encoder.norm.bias"], eps)
    # decoder: [e2d(x_vis) + pos_vis, mask_token + pos_masked]
    x_vis = F.linear(x_vis, p["encoder_to_decoder.weight"])
    Dd = x_vis.shape[2]
    pos = sinusoid_table(Np, Dd).to(x.dtype)[None].expand(B, -1, -1)
    pos_vis = pos[~mask].reshape(B, -1, Dd)
    dec_sel = mask if decode_mask is None else ~decode_mask
    pos_mask = pos[dec_sel].reshape(B, -1, Dd)
    x_full = torch.cat([x_vis + pos_vis, p["mask_token"] + pos_mask], dim=1)
    for i in range(cfg["ddepth"]):
        x_full = block(x_full, p, f"decoder.blocks.{i}.", cfg["dheads"], eps)
    n_mask = pos_mask.shape[1]
    y = F.layer_norm(x_full[:, -n_mask:], (Dd,), p["decoder.norm.weight"], p["decoder.norm.bias"], eps)
    pred = F.linear(y, p["decoder.head.weight"], p["decoder.head.bias"])
    # target: un-normalize, patchify b c (t p0) (h p1) (w p2) -> b (t h w) (p0 p1 p2) c, normalize per
    # patch and channel with the unbiased std, flatten channel-fastest
    mean = torch.tensor(MEAN, dtype=videos.dtype)[None, :, None, None, None]
    std = torch.tensor(STD, dtype=videos.dtype)[None, :, None, None, None]
    raw = videos * std + mean
    b, c, T, H, W = raw.shape
    t_, h_, w_ = T // tt, H // ps, W // ps
    patches = raw.reshape(b, c, t_, tt, h_, ps, w_, ps).permute(0, 2, 4, 6, 3, 5, 7, 1)
    patches = patches.reshape(b, t_ * h_ * w_, tt * ps * ps, c)
    norm = (patches - patches.mean(dim=-2, keepdim=True)) / (
        patches.var(dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6)
    norm = norm.reshape(b, t_ * h_ * w_, tt * ps * ps * c)
    labels = norm[dec_sel].reshape(B, -1, norm.shape[-1])
    if decode_mask is None:
        return F.mse_loss(pred, labels)
    loss_mask = mask[dec_sel].reshape(B, -1).to(pred.dtype)
    per_token = ((pred - labels) ** 2).mean(dim=-1)
    return (per_token * loss_mask).sum() / loss_mask.sum()


def classify_loss(p, videos, targets, drop_scales, cfg):
    """VideoMAE fine-tuning model (use_mean_pooling): embed all tokens + sinusoid, blocks with
    drop path, mean over tokens, fc_norm (eps 1e-6), head; timm SoftTargetCrossEntropy."""
    tt, ps, eps = cfg["tubelet"], cfg["patch"], cfg["eps"]
    x = F.conv3d(videos, p["patch_embed.proj.weight"], p["patch_embed.proj.bias"], stride=(tt, ps, ps))
    x = x.flatten(2).transpose(1, 2)
    Np, D = x.shape[1], x.shape[2]
    x = x + sinusoid_table(Np, D).to(x.dtype)[None]
    for i in range(cfg["depth"]):
        x = block(x, p, f"blocks.{i}.", cfg["heads"], eps, drop_scales[i])
    h = F.layer_norm(x.mean(1), (D,), p["fc_norm.weight"], p["fc_norm.bias"], eps)
    logits = F.linear(h, p["head.weight"], p["head.bias"])
    loss = torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    return loss, logits


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    denom = max(np.linalg.norm(b), 1e-30)
    return float(np.linalg.norm(a - b) / denom)


def arr(t):
    return np.asarray(t.data).reshape(t.shape)


def compare(name, stats, loss, p, grads, tol, extra_checks=()):
    failures = 0
    lerr = abs(stats["loss"] - loss.item()) / abs(loss.item())
    print(f"[{name}] loss: unmask {stats['loss']:.9g} torch {loss.item():.9g} rel {lerr:.2e}")
    if not (lerr <= tol):
        failures += 1
    for label, ours, ref in extra_checks:
        e = rel_err(ours, ref)
        print(f"[{name}] {label}: rel {e:.2e}")
        if not (e <= tol):
            failures += 1
    worst = 0.0
    for pname, t in p.items():
        if pname not in grads:
            print(f"MISSING gradient {pname}")
            failures += 1
            continue
        ours = arr(grads[pname]).astype(np.float64)
        ref = t.grad.numpy()
        if ours.shape != ref.shape:
            print(f"SHAPE {pname}: unmask {ours.shape} torch {ref.shape}")
            failures += 1
            continue
        e = rel_err(ours, ref)
        worst = max(worst, e)
        flag = "" if e <= tol else "  FAIL"
        if flag or os.environ.get("VERBOSE"):
            print(f"{pname:45s} |g| {np.linalg.norm(ref):.3e} rel {e:.2e}{flag}")
        if flag:
            failures += 1
    extra = set(grads) - set(p)
    if extra:
        print("unexpected gradients:", sorted(extra))
        failures += 1
    print(f"[{name}] {len(p)} gradients, worst norm-relative error {worst:.2e} (tol {tol:g}); "
          f"{'FAIL' if failures else 'OK'}")
    return failures


def run_step(unmask, extra_args):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [unmask, "videomae-step", "--preset", "tiny", "--perturb", "--output", tmp] + extra_args
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError("unmask videomae-step failed: " + res.stderr)
        stats = json.loads(res.stdout.strip().splitlines()[-1])
        inputs, _ = st_io.read_safetensors(os.path.join(tmp, "inputs.safetensors"))
        params, _ = st_io.read_safetensors(os.path.join(tmp, "params.safetensors"))
        grads, _ = st_io.read_safetensors(os.path.join(tmp, "grads.safetensors"))
    p = {k: torch.from_numpy(arr(v).astype(np.float64)).requires_grad_(True) for k, v in params.items()}
    return stats, inputs, p, grads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unmask", required=True, help="path to the unmask binary")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    torch.set_grad_enabled(True)
    failures = 0

    # 1. pretraining step
    stats, inputs, p, grads = run_step(args.unmask, ["--batch", "2", "--masked", "2", "--seed", str(args.seed)])
    videos = torch.from_numpy(arr(inputs["videos"]).astype(np.float64))
    mask = torch.from_numpy(arr(inputs["mask"]).astype(bool))
    loss = pretrain_loss(p, videos, mask, TINY)
    loss.backward()
    failures += compare("pretrain", stats, loss, p, grads, args.tol)

    # 1b. VideoMAE v2 dual masking: a running-cell decoder mask (ratio 0.5)
    stats, inputs, p, grads = run_step(args.unmask, ["--batch", "2", "--masked", "2", "--seed", str(args.seed),
                                                     "--decoder-mask-ratio", "0.5"])
    videos = torch.from_numpy(arr(inputs["videos"]).astype(np.float64))
    mask = torch.from_numpy(arr(inputs["mask"]).astype(bool))
    dmask = torch.from_numpy(arr(inputs["decoder_mask"]).astype(bool))
    loss = pretrain_loss(p, videos, mask, TINY, dmask)
    loss.backward()
    kept_visible = int((~dmask & ~mask).sum())
    print(f"[pretrain+decoder mask] {stats['decoded_tokens']} decoded tokens, {stats['loss_tokens']} in the loss, "
          f"{kept_visible} decoded but encoder-visible")
    if not (kept_visible > 0 and stats["loss_tokens"] == int((~dmask & mask).sum())):
        print("[pretrain+decoder mask] the masks do not exercise a decoded encoder-visible token")
        failures += 1
    failures += compare("pretrain+decoder mask", stats, loss, p, grads, args.tol)

    # 2. fine-tuning steps: smoothed one-hot targets; mixup/cutmix + drop path (the seeds pick
    #    both a mixup and a cutmix batch; the scales unmask drew are replayed here)
    cases = [("classify", ["--batch", "3", "--classify", "5", "--seed", str(args.seed)])]
    for seed in range(args.seed, args.seed + 6):
        cases.append((f"classify+mix+droppath(seed {seed})",
                      ["--batch", "4", "--classify", "5", "--mixup", "--drop-path", "0.5", "--seed", str(seed)]))
    kinds = set()
    for name, extra in cases:
        stats, inputs, p, grads = run_step(args.unmask, extra)
        kinds.add(("cutmix" if stats.get("cutmix") else "mixup") if "--mixup" in extra else "plain")
        videos = torch.from_numpy(arr(inputs["videos"]).astype(np.float64))
        targets = torch.from_numpy(arr(inputs["targets"]).astype(np.float64))
        drops = torch.from_numpy(arr(inputs["drop_scales"]).astype(np.float64))
        if "--drop-path" in extra and not (drops == 0).any():
            print(f"[{name}] note: no branch was dropped in this draw")
        loss, logits = classify_loss(p, videos, targets, drops, TINY)
        loss.backward()
        failures += compare(name, stats, loss, p, grads, args.tol,
                            [("logits", arr(inputs["logits"]).astype(np.float64), logits.detach().numpy())])
        if not np.allclose(arr(inputs["targets"]).sum(1), 1.0, atol=1e-6):
            print(f"[{name}] targets do not sum to 1")
            failures += 1
    if kinds != {"plain", "mixup", "cutmix"}:
        print(f"the cases covered {sorted(kinds)}, not plain + mixup + cutmix: pick other seeds")
        failures += 1
    print("videomae parity:", "FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
