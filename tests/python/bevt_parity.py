"""BEVT pretraining parity: `unmask bevt-step` against a float64 PyTorch implementation of BEVT's
joint step, written from the published code's algorithm (the backbone, neck and tokenizer
references next to this file: bevt_backbone_reference.py, bevt_neck_reference.py,
dalle_encoder_reference.py).

Usage: /usr/bin/python3 tests/python/bevt_parity.py --unmask build/unmask [--tol 1e-4]

Each case runs one step of a tiny BEVT (embed 32, depths 2/2/2/2, heads 1/2/4/8, window 2 x 4 x 4:
the video's stage 4 clips the window, the image stream rolls and masks in every block) on a
clip [1, 3, 4, 64, 64] and two 128 x 128 images with non-zero biases and LayerNorm parameters,
then checks:
  * the tokenizer's ids: every frame with a masked cell was tokenized (and no other), and its
    ids equal the float64 encoder's argmax wherever that argmax is clear (top-2 margin > 1e-3);
  * each stream's loss (CE mean over its masked tokens, targets = unmask's ids) and every
    gradient under its BEVT name: max |ours - ref| / max |ref| per tensor <= tol;
  * the same step with --all-positions (the neck and head at every position) and the default
    (masked positions only) give the same loss and gradients;
  * with drop path 0.5 (the scales unmask drew are replayed here; some branch must be dropped);
  * loading: the dumped params, tokenizer and inputs fed back through --weights / --tokenizer /
    --inputs reproduce the gradients exactly;
  * the fine-tuning model (--classify: norm, mean pooling, fc_cls, soft-target CE), with and
    without drop path: loss, logits and every gradient.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # noqa: F841
    print(f"bevt_parity.py: {e}", file=sys.stderr)
    sys.exit(77)
import st_io  # noqa: E402
from bevt_backbone_reference import backbone  # noqa: E402
from bevt_neck_reference import neck_head  # noqa: E402
from dalle_encoder_reference import encoder_logits  # noqa: E402

MODEL = ["--size", "tiny", "--embed-dim", "32", "--depths", "2,2,2,2", "--heads", "1,2,4,8", "--window", "2,4,4",
         "--vocab", "64"]
CFG = dict(embed=32, depths=(2, 2, 2, 2), heads=(1, 2, 4, 8), patch=(2, 4, 4), window=(2, 4, 4))


def arr(t):
    return np.asarray(t.data).reshape(t.shape)


def run_step(unmask, out, extra):
    res = subprocess.run([unmask, "bevt-step"] + MODEL + ["--output", out] + extra, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError("unmask bevt-step failed: " + res.stderr)
    stats = json.loads(res.stdout.strip().splitlines()[-1])
    read = lambda n: st_io.read_safetensors(os.path.join(out, n + ".safetensors"))[0]
    tok = read("tokenizer") if os.path.exists(os.path.join(out, "tokenizer.safetensors")) else None
    return stats, read("inputs"), read("params"), read("grads"), tok


def tensor(a):
    return torch.from_numpy(arr(a).astype(np.float64))


def check_ids(name, inputs, tok, stream):
    """Frames tokenized exactly where a mask cell is set; ids equal the float64 argmax where clear."""
    frames = tensor(inputs[f"{stream}_frames"])
    ids = arr(inputs[f"{stream}_ids"]).astype(np.int64)
    masks = arr(inputs[f"{stream}_masks"]).astype(bool)
    need = masks.reshape(masks.shape[0], masks.shape[1], -1).any(-1).repeat(2, axis=1).reshape(-1) if stream == "video" \
        else masks.reshape(masks.shape[0], -1).any(-1)
    failures = 0
    ran = (ids >= 0).all(-1)
    if not np.array_equal(ran, need) or (ids[~ran] != -1).any():
        print(f"[{name}] {stream}: tokenized frames {ran.astype(int).tolist()} != frames with masked cells "
              f"{need.astype(int).tolist()}")
        failures += 1
    groups = sum(1 for k in tok if k.endswith("block_1.res_path.conv_1.w"))
    blocks = sum(1 for k in tok if k.startswith("blocks.group_1.") and k.endswith("res_path.conv_1.w"))
    P = {k: tensor(v) for k, v in tok.items()}
    logits = encoder_logits(P, frames, groups, blocks)  # [n, V, h, w]
    n, V = logits.shape[:2]
    flat = logits.reshape(n, V, -1).permute(0, 2, 1)  # [n, cells, V]
    top2 = flat.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1] > 1e-3).numpy()
    ref = flat.argmax(-1).numpy()
    sel = clear & ran[:, None]
    agree = (ref[sel] == ids[sel]).mean() if sel.any() else 0.0
    print(f"[{name}] {stream} ids: {int(ran.sum())} of {len(ran)} frames tokenized; {sel.sum()} clear cells, "
          f"agreement {agree:.4f}; {len(np.unique(ids[ran]))} distinct ids")
    if not sel.any() or agree != 1.0 or len(np.unique(ids[ran])) < 2:  # ids that vary catch ordering bugs
        failures += 1
    return failures


def reference_loss(inputs, P, stream, drop_tensor):
    x = tensor(inputs["videos"]) if stream == "video" else tensor(inputs["images"]).unsqueeze(2)
    masks = torch.from_numpy(arr(inputs[f"{stream}_masks"]).astype(np.float64))
    if stream == "image":
        masks = masks.unsqueeze(1)  # [B, 1, h, w]
    token_mask = masks.repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)  # the patch grid
    drop = None
    if drop_tensor is not None:
        d = tensor(drop_tensor)  # [blocks, 2, B]
        drop = [(d[k, 0], d[k, 1]) for k in range(d.shape[0])]
    x3, x4 = backbone(P, x, token_mask, stream, drop=drop, **CFG)
    logits = neck_head(P, x3, x4, stream)
    ids = torch.from_numpy(arr(inputs[f"{stream}_ids"]).astype(np.int64))  # [frames, cells]
    out_mask = masks.repeat_interleave(2, dim=1) if stream == "video" else masks  # output frames
    sel = out_mask.reshape(-1).bool()
    targets = ids.reshape(-1)[sel]
    return F.cross_entropy(logits[sel], targets), int(sel.sum()), logits[sel].argmax(-1).eq(targets).sum().item()


def compare(name, stats, inputs, params, grads, tol):
    P = {k: torch.nn.Parameter(tensor(v)) for k, v in params.items()}
    failures = 0
    total = 0
    for stream in ("video", "image"):
        drop = inputs.get(f"drop_{stream}")
        loss, count, correct = reference_loss(inputs, P, stream, drop)
        ours = stats[f"{stream}_loss"]
        err = abs(ours - loss.item()) / abs(loss.item())
        ok = err <= tol and count == stats[f"{stream}_masked"]
        print(f"[{name}] {stream} loss: unmask {ours:.9g} torch {loss.item():.9g} rel {err:.2e}; "
              f"{count} masked tokens (unmask {stats[f'{stream}_masked']}), accuracy torch {correct / count:.4f} "
              f"unmask {stats[f'{stream}_accuracy']:.4f}{'' if ok else '  FAIL'}")
        failures += not ok
        total = total + loss
    total.backward()
    worst, worst_name = 0.0, ""
    for n, p in P.items():
        ref = p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
        if n not in grads:
            print(f"[{name}] MISSING gradient {n}")
            failures += 1
            continue
        ours = arr(grads[n]).astype(np.float64)
        scale = max(np.abs(ref).max(), 1e-30)
        e = float(np.abs(ours - ref).max() / scale)
        if e > worst:
            worst, worst_name = e, n
        if e > tol or os.environ.get("VERBOSE"):
            print(f"[{name}] {n:60s} max|g| {scale:.3e} err {e:.2e}{'  FAIL' if e > tol else ''}")
        failures += e > tol
    print(f"[{name}] {len(P)} gradients, worst max-normalised error {worst:.2e} ({worst_name}), tol {tol:g}; "
          f"{'FAIL' if failures else 'OK'}")
    return failures


def compare_classify(name, stats, inputs, params, grads, tol):
    """The fine-tuning model: backbone (video, no mask token) -> norm -> mean -> fc_cls -> soft CE."""
    P = {k: torch.nn.Parameter(tensor(v)) for k, v in params.items()}
    videos, targets = tensor(inputs["videos"]), tensor(inputs["targets"])
    d = tensor(inputs["drop_scales"])
    drop = [(d[k, 0], d[k, 1]) for k in range(d.shape[0])]
    B = videos.shape[0]
    _, x4 = backbone(P, videos, None, "video", drop=drop, **CFG)
    y = F.layer_norm(x4, (x4.shape[-1],), P["backbone.norm.weight"], P["backbone.norm.bias"], 1e-5)
    logits = F.linear(y.reshape(B, -1, y.shape[-1]).mean(1), P["cls_head.fc_cls.weight"], P["cls_head.fc_cls.bias"])
    loss = torch.sum(-targets * F.log_softmax(logits, dim=-1), dim=-1).mean()
    loss.backward()
    failures = 0
    err = abs(stats["loss"] - loss.item()) / abs(loss.item())
    lerr = float(np.abs(arr(inputs["logits"]) - logits.detach().numpy()).max() / np.abs(logits.detach().numpy()).max())
    print(f"[{name}] loss: unmask {stats['loss']:.9g} torch {loss.item():.9g} rel {err:.2e}; logits {lerr:.2e}")
    failures += err > tol or lerr > tol
    worst, worst_name = 0.0, ""
    for n, p in P.items():
        ref = p.grad.numpy() if p.grad is not None else np.zeros(p.shape)
        ours = arr(grads[n]).astype(np.float64)
        e = float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))
        if e > worst:
            worst, worst_name = e, n
        if e > tol:
            print(f"[{name}] {n:60s} err {e:.2e}  FAIL")
            failures += 1
    names = set(grads)
    if any(n.startswith("backbone.patch_embed_2d") or n == "backbone.mask_token" for n in names):
        print(f"[{name}] the classifier holds image-stream parameters")
        failures += 1
    print(f"[{name}] {len(P)} gradients, worst max-normalised error {worst:.2e} ({worst_name}); "
          f"{'FAIL' if failures else 'OK'}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unmask", required=True)
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_grad_enabled(True)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        stats, inputs, params, grads, tok = run_step(args.unmask, base, ["--perturb", "--seed", "3"])
        for stream in ("video", "image"):
            failures += check_ids("masked positions", inputs, tok, stream)
        failures += compare("masked positions", stats, inputs, params, grads, args.tol)

        stats_all, _, _, grads_all, _ = run_step(args.unmask, os.path.join(tmp, "all"),
                                                 ["--perturb", "--seed", "3", "--all-positions"])
        worst = max(float(np.abs(arr(grads_all[n]) - arr(grads[n])).max() / max(np.abs(arr(grads[n])).max(), 1e-30))
                    for n in grads)
        same_loss = abs(stats_all["loss"] - stats["loss"]) <= 1e-6 * abs(stats["loss"])
        print(f"[all positions] loss {stats_all['loss']:.9g} vs masked positions {stats['loss']:.9g}; "
              f"gradients differ by at most {worst:.2e} (max-normalised)")
        failures += not (same_loss and worst <= 1e-5)

        stats_d, inputs_d, params_d, grads_d, _ = run_step(args.unmask, os.path.join(tmp, "drop"),
                                                           ["--perturb", "--seed", "4", "--drop-path", "0.5"])
        dropped = sum(int((arr(inputs_d[f"drop_{s}"]) == 0).sum()) for s in ("video", "image"))
        print(f"[drop path 0.5] {dropped} branches dropped")
        failures += dropped == 0
        failures += compare("drop path 0.5", stats_d, inputs_d, params_d, grads_d, args.tol)

        again = os.path.join(tmp, "again")
        stats_l, _, _, grads_l, _ = run_step(
            args.unmask, again, ["--weights", os.path.join(base, "params.safetensors"), "--tokenizer",
                                 os.path.join(base, "tokenizer.safetensors"), "--inputs",
                                 os.path.join(base, "inputs.safetensors"), "--seed", "3"])
        exact = stats_l["loss"] == stats["loss"] and all(np.array_equal(arr(grads_l[n]), arr(grads[n])) for n in grads)
        print(f"[load] the dumped weights, tokenizer and batch fed back: {'identical' if exact else 'DIFFERENT'}")
        failures += not exact
        # The fine-tuning model: plain, and with drop path 0.5 (the scales unmask drew replayed)
        for name, extra in (("classify", ["--seed", "5"]), ("classify+droppath", ["--seed", "6", "--drop-path", "0.5"])):
            stats_c, inputs_c, params_c, grads_c, _ = run_step(
                args.unmask, os.path.join(tmp, name), ["--classify", "5", "--clips", "3", "--perturb"] + extra)
            if "droppath" in name and not (arr(inputs_c["drop_scales"]) == 0).any():
                print(f"[{name}] no branch was dropped in this draw: pick another seed")
                failures += 1
            failures += compare_classify(name, stats_c, inputs_c, params_c, grads_c, args.tol)
    print("bevt parity:", "FAIL" if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
