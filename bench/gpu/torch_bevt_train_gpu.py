#!/usr/bin/env python3
"""PyTorch peer for `unmask bench bevt --device cuda` (seed 000's BEVT training benchmark): the
same iteration in PyTorch, written on the functional BEVT reference of unmask's parity tests
(tests/python/bevt_backbone_reference.py, swin_block_reference.py, dalle_encoder_reference.py)
with F.scaled_dot_product_attention as the block's attention (the relative-position bias plus
the shift mask as the additive float mask) and its index tables and masks cached on the device.

An iteration, per --batch-size BS (FAMBench run_bevt_train.sh): BS / 2 clips [3, T, S, S] and
4 BS images [3, S, S] with BEiT-style masks on the S/16 grid (half the cells), the DALL-E
encoder (random weights, no grad) on the 112 x 112 copies of the frames, Video Swin on both
streams with the mask token, the necks, LayerNorm and the 8192-way head on the masked positions
only (the work unmask does; BEVT's head scores every position), cross-entropy, loss / 2, backward;
torch.optim.AdamW (fused on CUDA, clip 3.0) every second iteration. Random weights in BEVT's
shapes; the inputs made once on the device. Modes: eager, compile (torch.compile of the loss
function); precision bf16 (torch.autocast, fp32 master weights) or fp32. Prints one JSON row per
(mode, precision): median seconds per iteration over --iters after --warmup, samples/s in the
benchmark's definition (BS / s), peak memory. A row that fails prints "failed": true and the error.

  python3 bench/gpu/torch_bevt_train_gpu.py --batch-size 8 --modes eager,compile --precision bf16
  python3 bench/gpu/torch_bevt_train_gpu.py --device cpu --size tiny-test --iters 2 --warmup 1  (smoke test)
"""
import argparse, functools, json, os, statistics, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "python"))
import bevt_backbone_reference as ref  # noqa: E402
from dalle_encoder_reference import encoder_logits  # noqa: E402
import swin_block_reference as swin_ref  # noqa: E402
from window_attention_reference import compute_mask, relative_position_index  # noqa: E402

SIZES = {  # embed, depths, heads, window, frames, crop, tokenizer hidden / blocks, vocab
    "base": (128, (2, 2, 18, 2), (4, 8, 16, 32), (8, 7, 7), 16, 224, 256, 2, 8192),
    "tiny-test": (32, (2, 2, 2, 2), (1, 2, 4, 8), (2, 4, 4), 4, 128, 16, 1, 64),
}

ap = argparse.ArgumentParser()
ap.add_argument("--batch-size", type=int, default=8)
ap.add_argument("--size", default="base", choices=sorted(SIZES))
ap.add_argument("--modes", default="eager,compile")
ap.add_argument("--precision", default="bf16")  # any of bf16, fp32
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--warmup", type=int, default=4)
ap.add_argument("--device", default="cuda")
a = ap.parse_args()
dev = torch.device(a.device)
E, DEPTHS, HEADS, WIN, T, S, TOK_HIDDEN, TOK_BLOCKS, VOCAB = SIZES[a.size]
BS = a.batch_size
CLIPS, IMAGES = BS // 2, 4 * BS
g = torch.Generator(device="cpu").manual_seed(0)


def randn(*shape, std=0.02):
    return (torch.randn(*shape, generator=g) * std).to(dev).requires_grad_()


def const(v, *shape):
    return torch.full(shape, float(v), device=dev).requires_grad_()


def bevt_params():
    P = {}
    P["backbone.patch_embed.proj.weight"], P["backbone.patch_embed.proj.bias"] = randn(E, 3, 2, 4, 4), randn(E)
    P["backbone.patch_embed_2d.proj.weight"], P["backbone.patch_embed_2d.proj.bias"] = randn(E, 3, 4, 4), randn(E)
    for n in ("patch_embed", "patch_embed_2d"):
        P[f"backbone.{n}.norm.weight"], P[f"backbone.{n}.norm.bias"] = const(1, E), const(0, E)
    P["backbone.mask_token"] = randn(E)
    rows = (2 * WIN[0] - 1) * (2 * WIN[1] - 1) * (2 * WIN[2] - 1)
    for i in range(4):
        C = E << i
        for j in range(DEPTHS[i]):
            p = f"backbone.layers.{i}.blocks.{j}."
            P[p + "norm1.weight"], P[p + "norm1.bias"] = const(1, C), const(0, C)
            P[p + "attn.qkv.weight"], P[p + "attn.qkv.bias"] = randn(3 * C, C), const(0, 3 * C)
            P[p + "attn.proj.weight"], P[p + "attn.proj.bias"] = randn(C, C), const(0, C)
            P[p + "norm2.weight"], P[p + "norm2.bias"] = const(1, C), const(0, C)
            P[p + "mlp.fc1.weight"], P[p + "mlp.fc1.bias"] = randn(4 * C, C), const(0, 4 * C)
            P[p + "mlp.fc2.weight"], P[p + "mlp.fc2.bias"] = randn(C, 4 * C), const(0, C)
            P[p + "attn.relative_position_bias_table"] = randn(rows, HEADS[i])
        if i < 3:
            p = f"backbone.layers.{i}.downsample."
            P[p + "norm.weight"], P[p + "norm.bias"] = const(1, 4 * C), const(0, 4 * C)
            P[p + "reduction.weight"] = randn(2 * C, 4 * C)
    W = 8 * E
    P["backbone.norm.weight"], P["backbone.norm.bias"] = const(1, W), const(0, W)
    P["backbone.fpn.0.weight"], P["backbone.fpn.0.bias"] = randn(W, W, 2, 2), randn(W)
    P["backbone.fpn_s.0.weight"], P["backbone.fpn_s.0.bias"] = randn(W, W, 1, 2, 2), randn(W)
    P["backbone.fpn_t.0.weight"], P["backbone.fpn_t.0.bias"] = randn(W, W, 2, 1, 1), randn(W)
    for n in ("lm_down", "lm_down_st.0"):
        P[f"backbone.{n}.weight"], P[f"backbone.{n}.bias"] = randn(W, W + W // 2), const(0, W)
    P["cls_head.lm_head.weight"], P["cls_head.lm_head.bias"] = randn(VOCAB, W), const(0, VOCAB)
    return P


def dalle_params():
    P, width = {}, TOK_HIDDEN
    conv = lambda o, i, k: (torch.randn(o, i, k, k, generator=g) / (i * k * k) ** 0.5).to(dev)
    P["blocks.input.w"], P["blocks.input.b"] = conv(TOK_HIDDEN, 3, 7), torch.zeros(TOK_HIDDEN, device=dev)
    for gi in range(4):
        out = TOK_HIDDEN << gi
        for bi in range(TOK_BLOCKS):
            inp, mid, p = (width if bi == 0 else out), out // 4, f"blocks.group_{gi + 1}.block_{bi + 1}."
            if inp != out:
                P[p + "id_path.w"], P[p + "id_path.b"] = conv(out, inp, 1), torch.zeros(out, device=dev)
            for k, (o, i, kk) in enumerate(((mid, inp, 3), (mid, mid, 3), (mid, mid, 3), (out, mid, 1)), 1):
                P[p + f"res_path.conv_{k}.w"], P[p + f"res_path.conv_{k}.b"] = conv(o, i, kk), torch.zeros(o, device=dev)
        width = out
    P["blocks.output.conv.w"], P["blocks.output.conv.b"] = conv(VOCAB, width, 1), torch.zeros(VOCAB, device=dev)
    return P


_index, _masks = {}, {}
SDPA = hasattr(F, "scaled_dot_product_attention")  # PyTorch 2.0 and later


def attend(q, k, v, bias):
    bias = bias.to(q.dtype)
    if SDPA:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return torch.softmax((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1) + bias, dim=-1) @ v  # older torch


def cached_mask(D, H, W, ws, shift):  # the reference's masks, made once per shape on the device
    key = (D, H, W, tuple(ws), tuple(shift))
    if key not in _masks:
        _masks[key] = compute_mask(D, H, W, ws, shift).to(dev, torch.float32)
    return _masks[key]


def cached_index(ws):  # the reference's relative-position index, made once per window on the device
    if tuple(ws) not in _index:
        _index[tuple(ws)] = relative_position_index(ws).to(dev)
    return _index[tuple(ws)]


# The reference backbone with SDPA attention and its index tables cached on the device.
swin_ref.relative_position_index = cached_index
ref.swin_block, ref.compute_mask = functools.partial(swin_ref.swin_block, attend=attend), cached_mask


def neck_head_masked(P, v3, v4, stream, masked):
    """bevt_neck_reference.neck_head, scoring only the masked output tokens (`masked`: bool per token)."""
    W = v4.shape[-1]
    v4 = v4.permute(0, 4, 1, 2, 3)
    if stream == "image":
        up = F.conv_transpose2d(v4[:, :, 0], P["backbone.fpn.0.weight"], P["backbone.fpn.0.bias"], stride=2)
        h = F.linear(torch.cat([v3, up.permute(0, 2, 3, 1).unsqueeze(1)], -1), P["backbone.lm_down.weight"],
                     P["backbone.lm_down.bias"])
    else:
        up = F.conv_transpose3d(v4, P["backbone.fpn_s.0.weight"], P["backbone.fpn_s.0.bias"], stride=(1, 2, 2))
        h = F.linear(torch.cat([v3, up.permute(0, 2, 3, 4, 1)], -1), P["backbone.lm_down_st.0.weight"],
                     P["backbone.lm_down_st.0.bias"])
        h = F.conv_transpose3d(h.permute(0, 4, 1, 2, 3), P["backbone.fpn_t.0.weight"], P["backbone.fpn_t.0.bias"],
                               stride=(2, 1, 1)).permute(0, 2, 3, 4, 1)
    h = h.reshape(-1, W)[masked]
    h = F.layer_norm(h, (W,), P["backbone.norm.weight"], P["backbone.norm.bias"], 1e-5)
    return F.linear(h, P["cls_head.lm_head.weight"], P["cls_head.lm_head.bias"])


def make_batch():
    gen = torch.Generator(device="cpu").manual_seed(11)
    cells = lambda n, planes: (torch.rand(n, planes, S // 16, S // 16, generator=gen) < 0.5).to(dev)
    return {
        "videos": torch.randn(CLIPS, 3, T, S, S, generator=gen).to(dev),
        "video_frames": torch.rand(CLIPS * T, 3, S // 2, S // 2, generator=gen).to(dev) * 0.8 + 0.1,
        "images": torch.randn(IMAGES, 3, 1, S, S, generator=gen).to(dev),
        "image_frames": torch.rand(IMAGES, 3, S // 2, S // 2, generator=gen).to(dev) * 0.8 + 0.1,
        "video_cells": cells(CLIPS, T // 2), "image_cells": cells(IMAGES, 1),
    }


def loss_fn(P, TP, b, drop_rate=0.3):
    total = 0.0
    for stream in ("video", "image"):
        x, cells, frames = b[stream + "s"], b[stream + "_cells"], b[stream + "_frames"]
        B = x.shape[0]
        with torch.no_grad():  # the frozen tokenizer: ids per frame on the S/16 grid
            ids = encoder_logits(TP, frames, 4, TOK_BLOCKS).argmax(1).reshape(B, -1, S // 16, S // 16)
        per_frame = cells.repeat_interleave(2, dim=1) if stream == "video" else cells  # [B, frames, h, w]
        tmask = cells.repeat_interleave(4, dim=2).repeat_interleave(4, dim=3)  # the patch grid's token mask
        nblocks = sum(DEPTHS)
        drop = [tuple(torch.where(torch.rand(B, device=dev) < drop_rate * k / (nblocks - 1), 0.0, 1 / (1 - drop_rate * k / (nblocks - 1)))
                      for _ in range(2)) for k in range(nblocks)]
        x3, x4 = ref.backbone(P, x, tmask, stream, embed=E, depths=DEPTHS, heads=HEADS, window=WIN, drop=drop)
        logits = neck_head_masked(P, x3, x4, stream, per_frame.reshape(-1))
        total = total + F.cross_entropy(logits.float(), ids[per_frame])
    return total / 2  # update_interval 2


rows = []
for prec in a.precision.split(","):
    for mode in a.modes.split(","):
        label = f"torch {mode} {prec}"
        try:
            torch.manual_seed(0)
            P, TP, b = bevt_params(), dalle_params(), make_batch()
            adam = dict(lr=5e-4, weight_decay=0.05, betas=(0.9, 0.999), eps=1e-8)
            try:  # fused on CUDA where this torch has it (2.0 and later)
                opt = torch.optim.AdamW(list(P.values()), fused=dev.type == "cuda", **adam)
            except TypeError:
                opt = torch.optim.AdamW(list(P.values()), **adam)
            fn = torch.compile(loss_fn) if mode == "compile" else loss_fn
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            times = []
            for it in range(a.warmup + a.iters):
                t0 = time.perf_counter()
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=prec == "bf16"):
                    loss = fn(P, TP, b)
                loss.backward()
                if it % 2 == 1:
                    torch.nn.utils.clip_grad_norm_(list(P.values()), 3.0)
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                if it >= a.warmup:
                    times.append(time.perf_counter() - t0)
            s = statistics.median(times)
            row = {"label": label, "size": a.size, "batch_size": BS, "s_per_iter": round(s, 5),
                   "samples_per_s": round(BS / s, 2), "clips_per_s": round(CLIPS / s, 2),
                   "images_per_s": round(IMAGES / s, 2), "loss": round(float(loss), 5),
                   "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20) if dev.type == "cuda" else None,
                   "attention": "sdpa" if SDPA else "math", "torch": torch.__version__}
        except Exception as e:  # noqa: BLE001 (a failed row is a result: OOM, compile errors)
            if os.environ.get("TORCH_BEVT_TRACE"):
                import traceback
                traceback.print_exc()
            row = {"label": label, "failed": True, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        print(json.dumps(row), flush=True)
