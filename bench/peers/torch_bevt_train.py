"""BEVT's training iteration in PyTorch, the peer of `unmask bench bevt` on the CPU and on a GPU.

Usage: /usr/bin/python3 bench/peers/torch_bevt_train.py --size tiny|small|base [--batch-size 2]
           [--frames 16] [--crop 224] [--iters 3] [--skip 1] [--threads 2]
       python3 bench/peers/torch_bevt_train.py --device cuda --size base --batch-size 8 --precision bf16
           --attention sdpa [--compile] [--head masked] --iters 25 --skip 5

The model is the PyTorch implementation of BEVT written from its published code for the parity
tests (tests/python/bevt_backbone_reference.py, bevt_neck_reference.py,
dalle_encoder_reference.py: SwinTransformerBEVT's two streams, the necks, the shared head,
DALL-E's encoder), run as BEVT runs an iteration: the tokenizer under no_grad on every frame
(BS/2 clips x frames + 4 BS images), both streams' forward with drop path 0.3, the neck and head
at every position, CE over the masked tokens of each stream, one backward of the sum / 2, AdamW
(lr 5e-4, wd 0.05, clip 3.0) every second iteration. Random weights and pixels; BEiT-like
masks (half the cells; the video's over a tube of 4 to 8 slices). Prints one JSON line: the
mean iteration time over iterations skip .. iters - 1 and the peak RSS (and GPU memory).
The relative-position index is made once per window (BEVT's registered buffer) and the shift
masks once per shape, on the device. Options for the best PyTorch on a GPU: --precision bf16
(torch.autocast, fp32 master weights), --attention sdpa (F.scaled_dot_product_attention with the
bias plus the mask as its float mask, PyTorch 2), --compile (torch.compile of the forward and
loss), --head masked (the neck and head at the masked positions only, as unmask runs them).
"""
import argparse
import functools
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
import bevt_backbone_reference as backbone_ref  # noqa: E402
import swin_block_reference as swin_ref  # noqa: E402
from bevt_neck_reference import neck_head  # noqa: E402
from dalle_encoder_reference import encoder_logits  # noqa: E402
from window_attention_reference import compute_mask, relative_position_index  # noqa: E402

SIZES = {"tiny": (96, (2, 2, 6, 2), (3, 6, 12, 24)), "small": (96, (2, 2, 18, 2), (3, 6, 12, 24)),
         "base": (128, (2, 2, 18, 2), (4, 8, 16, 32))}
WINDOW, PATCH, VOCAB = (8, 7, 7), (2, 4, 4), 8192


def make_params(embed, depths, heads, device):
    g = torch.Generator().manual_seed(0)
    P = {}

    def add(name, *shape, std=0.02):
        P[name] = (torch.randn(*shape, generator=g) * std).to(device).requires_grad_(True)

    C = embed
    add("backbone.patch_embed.proj.weight", C, 3, *PATCH), add("backbone.patch_embed.proj.bias", C)
    add("backbone.patch_embed_2d.proj.weight", C, 3, 4, 4), add("backbone.patch_embed_2d.proj.bias", C)
    for s in ("patch_embed", "patch_embed_2d"):
        add(f"backbone.{s}.norm.weight", C), add(f"backbone.{s}.norm.bias", C)
    add("backbone.mask_token", C)
    table = (2 * WINDOW[0] - 1) * (2 * WINDOW[1] - 1) * (2 * WINDOW[2] - 1)
    for i in range(4):
        D = C << i
        for j in range(depths[i]):
            pre = f"backbone.layers.{i}.blocks.{j}."
            for n, shape in (("norm1.weight", (D,)), ("norm1.bias", (D,)), ("attn.qkv.weight", (3 * D, D)),
                             ("attn.qkv.bias", (3 * D,)), ("attn.proj.weight", (D, D)), ("attn.proj.bias", (D,)),
                             ("attn.relative_position_bias_table", (table, heads[i])), ("norm2.weight", (D,)),
                             ("norm2.bias", (D,)), ("mlp.fc1.weight", (4 * D, D)), ("mlp.fc1.bias", (4 * D,)),
                             ("mlp.fc2.weight", (D, 4 * D)), ("mlp.fc2.bias", (D,))):
                add(pre + n, *shape)
        if i < 3:
            pre = f"backbone.layers.{i}.downsample."
            add(pre + "reduction.weight", 2 * D, 4 * D), add(pre + "norm.weight", 4 * D), add(pre + "norm.bias", 4 * D)
    W = 8 * C
    add("backbone.norm.weight", W), add("backbone.norm.bias", W)
    add("backbone.fpn.0.weight", W, W, 2, 2), add("backbone.fpn.0.bias", W)
    add("backbone.lm_down.weight", W, W + W // 2), add("backbone.lm_down.bias", W)
    add("backbone.fpn_s.0.weight", W, W, 1, 2, 2), add("backbone.fpn_s.0.bias", W)
    add("backbone.lm_down_st.0.weight", W, W + W // 2), add("backbone.lm_down_st.0.bias", W)
    add("backbone.fpn_t.0.weight", W, W, 2, 1, 1), add("backbone.fpn_t.0.bias", W)
    add("cls_head.lm_head.weight", VOCAB, W), add("cls_head.lm_head.bias", VOCAB)
    return P


def make_tokenizer(device):
    g = torch.Generator().manual_seed(1)
    T = {}

    def conv(name, cin, cout, k):
        T[name + ".w"] = (torch.randn(cout, cin, k, k, generator=g) / (cin * k * k) ** 0.5).to(device)
        T[name + ".b"] = torch.zeros(cout, device=device)

    conv("blocks.input", 3, 256, 7)
    width = 256
    for gi in range(1, 5):
        out = 256 << (gi - 1)
        for b in range(1, 3):
            cin = width if b == 1 else out
            pre = f"blocks.group_{gi}.block_{b}."
            if cin != out:
                conv(pre + "id_path", cin, out, 1)
            conv(pre + "res_path.conv_1", cin, out // 4, 3)
            conv(pre + "res_path.conv_2", out // 4, out // 4, 3)
            conv(pre + "res_path.conv_3", out // 4, out // 4, 3)
            conv(pre + "res_path.conv_4", out // 4, out, 1)
        width = out
    conv("blocks.output.conv", width, VOCAB, 1)
    return T


def masks(n, planes, side, g):
    m = (torch.rand(n, 1, side, side, generator=g) < 0.5).float().expand(n, planes, side, side).clone()
    if planes > 1:  # a tube of 4..planes slices from a random start, cyclic
        for b in range(n):
            start, length = int(torch.randint(planes, (1,), generator=g)), int(torch.randint(planes // 2, planes + 1, (1,), generator=g))
            keep = torch.zeros(planes)
            for t in range(length):
                keep[(start + t) % planes] = 1
            m[b] *= keep.view(planes, 1, 1)
    return m


def cache_reference_tables(device):
    """The reference's per-call index and masks, made once per shape on the device."""
    index, masks_ = {}, {}

    def cached_index(ws):
        if tuple(ws) not in index:
            index[tuple(ws)] = relative_position_index(ws).to(device)
        return index[tuple(ws)]

    def cached_mask(D, H, W, ws, shift):
        key = (D, H, W, tuple(ws), tuple(shift))
        if key not in masks_:
            masks_[key] = compute_mask(D, H, W, ws, shift).to(device, torch.float32)
        return masks_[key]

    swin_ref.relative_position_index = cached_index
    backbone_ref.compute_mask = cached_mask


def sdpa(q, k, v, bias):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--skip", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--attention", default="math", choices=["math", "sdpa"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--head", default="all", choices=["all", "masked"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    embed, depths, heads = SIZES[a.size]
    P = make_params(embed, depths, heads, dev)
    T = make_tokenizer(dev)
    cache_reference_tables(dev)
    attend = sdpa if a.attention == "sdpa" else None
    backbone_ref.swin_block = functools.partial(swin_ref.swin_block, attend=attend)
    try:  # fused on CUDA where this torch has it (2.0 and later)
        opt = torch.optim.AdamW(list(P.values()), lr=5e-4, weight_decay=0.05, fused=cuda)
    except TypeError:
        opt = torch.optim.AdamW(list(P.values()), lr=5e-4, weight_decay=0.05)
    clips, images, S, F_ = a.batch_size // 2, 4 * a.batch_size, a.crop, a.frames
    g = torch.Generator().manual_seed(2)
    videos = torch.randn(clips, 3, F_, S, S, generator=g).to(dev)
    imgs = torch.randn(images, 1, 3, S, S, generator=g).transpose(1, 2).to(dev)  # [B, 3, 1, S, S]
    frames = (torch.rand(clips * F_ + images, 3, S // 2, S // 2, generator=g) * 0.8 + 0.1).to(dev)
    cfg = dict(embed=embed, depths=depths, heads=heads, patch=PATCH, window=WINDOW)
    nblocks = sum(depths)

    def stream_loss(stream, x, m, tid, drop):
        token_mask = m.repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)
        x3, x4 = backbone_ref.backbone(P, x, token_mask, stream, drop=drop, **cfg)
        out_mask = m.repeat_interleave(2, dim=1) if stream == "video" else m
        sel = out_mask.reshape(-1).bool()
        if a.head == "masked":
            logits = neck_head(P, x3, x4, stream, rows=sel)
        else:
            logits = neck_head(P, x3, x4, stream)[sel]
        return F.cross_entropy(logits.float(), tid.reshape(-1)[sel])

    loss_fn = torch.compile(stream_loss) if a.compile else stream_loss
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for it in range(a.iters):
        t0 = time.perf_counter()
        if it % 2 == 0:
            opt.zero_grad(set_to_none=True)
        mv = masks(clips, F_ // 2, S // 16, g).to(dev)   # [clips, F/2, S/16, S/16]
        mi = masks(images, 1, S // 16, g).to(dev)        # [images, 1, S/16, S/16]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            with torch.no_grad():
                ids = encoder_logits(T, frames, 4, 2).argmax(1).reshape(clips * F_ + images, -1)
            total = 0
            for stream, x, m, tid in (("video", videos, mv, ids[:clips * F_]), ("image", imgs, mi, ids[clips * F_:])):
                n = x.shape[0]
                drop = [((torch.rand(n, generator=g) >= r).float() / (1 - r), (torch.rand(n, generator=g) >= r).float() / (1 - r))
                        for r in [0.3 * k / (nblocks - 1) for k in range(nblocks)]]
                drop = [(u.to(dev), v.to(dev)) for u, v in drop]
                total = total + loss_fn(stream, x, m, tid, drop)
        (total / 2).backward()
        if it % 2 == 1:
            torch.nn.utils.clip_grad_norm_(list(P.values()), 3.0)
            opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        print(f"iteration {it + 1}/{a.iters}: {times[-1]:.3f} s, loss {float(total):.4f}", file=sys.stderr)
    window = times[a.skip:]
    mean = sum(window) / len(window)
    print(json.dumps({"engine": "pytorch", "size": a.size, "batch_size": a.batch_size, "device": a.device,
                      "precision": a.precision, "attention": a.attention, "compile": a.compile, "head": a.head,
                      "s_per_it": mean, "samples_per_s": a.batch_size / mean, "times": times,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                      "torch": torch.__version__, "threads": a.threads}))


if __name__ == "__main__":
    main()
