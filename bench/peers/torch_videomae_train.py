#!/usr/bin/python3
"""PyTorch VideoMAE pretraining-step benchmark (the peer for `unmask bench videomae`), CPU or GPU.

  /usr/bin/python3 bench/peers/torch_videomae_train.py --model vit-s --batch 4 --steps 3 --warmup 1 --threads 2
  python3 bench/peers/torch_videomae_train.py --device cuda --precision bf16 --attention sdpa --model vit-b --batch 64

The model is VideoMAE's pretraining model written out in torch.nn modules the way VideoMAE's
modeling_pretrain.py computes it (/work/shared/reference/video.md section 1), fp32, eager:
  Conv3d tubelet embedding (2 x 16 x 16, stride = kernel) over ALL tokens, flatten (t, h, w),
  + the fixed 1-D sinusoid table; the visible tokens x[~mask]; pre-LN blocks (LayerNorm eps 1e-6,
  fused qkv Linear without bias + cat(q_bias, 0, v_bias), q * head_dim^-0.5, q k^T, softmax, @ v,
  proj; fc1 -> exact GELU -> fc2); encoder norm; encoder_to_decoder (no bias); decoder input
  cat([x_vis + pos_vis, mask_token + pos_masked]); decoder blocks; norm + head on the last
  N_masked rows; loss = MSE against the normalised-pixel target (un-normalise the clip, per-patch
  per-channel mean and unbiased std, (x - mean) / (std + 1e-6), (p0 p1 p2 c) order) of the
  masked tokens, built under no_grad inside the step as VideoMAE's engine_for_pretraining.py does.
  Attention: --attention eager is plain matmul-softmax-matmul, what VideoMAE's own code runs (and
  all torch 1.13 has); --attention sdpa calls F.scaled_dot_product_attention (torch >= 2.0: flash /
  memory-efficient kernels on a GPU), the default when it exists.
GPU (--device cuda): the model, the clip batch and the masks are on the GPU before timing; the
step is bracketed by torch.cuda.synchronize(); --precision bf16 runs forward and loss under
torch.autocast(bfloat16) (fp32 master weights, no loss scaling), tf32 sets allow_tf32; --compile
wraps the model in torch.compile. Memory: torch.cuda.max_memory_allocated over the row.
Init: xavier_uniform on every Linear, zero biases, LayerNorm (1, 0), Conv3d PyTorch default,
mask_token trunc_normal(0.02, +-0.02). Optimizer: torch.optim.AdamW(betas (0.9, 0.95), eps 1e-8,
weight decay 0.05 except 1-D params and biases (VideoMAE's skip list), no clipping).

A timed step: zero_grad, forward (+ target and loss), backward, AdamW step; one fixed random clip
batch (ImageNet-normalised uniform pixels) and a fresh tube mask per step (int(ratio * H'W')
masked per time slot, drawn before timing as VideoMAE's data loader does). One JSON row per batch
size, with the same fields as `unmask bench videomae --format json` (FLOPs by the same analytic
count; MFU against --peak-gflops, which bench/compare_videomae_cpu.sh takes from unmask's row).
"""
from __future__ import annotations

import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# enc dim / depth / heads, dec dim / heads, mlp ratio, patch, default frames, default img
SIZES = {
    "tiny": (64, 2, 2, 32, 2, 4.0, 16, 4, 32),
    "vit-s": (384, 12, 6, 192, 3, 4.0, 16, 16, 224),
    "vit-b": (768, 12, 12, 384, 6, 4.0, 16, 16, 224),
    "vit-l": (1024, 24, 16, 512, 8, 4.0, 16, 16, 224),
    "vit-h": (1280, 32, 16, 640, 8, 4.0, 16, 16, 224),
    "vit-g": (1408, 40, 16, 512, 8, 48 / 11, 14, 16, 224),
}
TUBELET = 2
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SSV2_TRAIN_VIDEOS, SSV2_EPOCHS = 168913, 1200


def sinusoid_table(n, d):
    pos = np.arange(n)[:, None] / np.power(10000, 2 * (np.arange(d) // 2) / d)[None, :]
    pos[:, 0::2], pos[:, 1::2] = np.sin(pos[:, 0::2]), np.cos(pos[:, 1::2])
    return torch.tensor(pos, dtype=torch.float32).unsqueeze(0)


USE_SDPA = False  # set by main(): --attention sdpa


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.scale = heads, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_bias, self.v_bias = nn.Parameter(torch.zeros(dim)), nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        qkv = F.linear(x, self.qkv.weight, bias).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if USE_SDPA:
            o = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])  # scale = head_dim^-0.5
        else:
            q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]
            o = (q @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim, eps=1e-6), Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VideoMAEPretrain(nn.Module):
    def __init__(self, D, depth, H, Dd, Hd, mlp_ratio, patch, frames, img, dec_depth):
        super().__init__()
        self.patch = patch
        self.patch_embed = nn.Conv3d(3, D, kernel_size=(TUBELET, patch, patch), stride=(TUBELET, patch, patch))
        n = (frames // TUBELET) * (img // patch) ** 2
        self.register_buffer("pos_enc", sinusoid_table(n, D), persistent=False)
        self.register_buffer("pos_dec", sinusoid_table(n, Dd), persistent=False)
        self.encoder = nn.ModuleList(Block(D, H, mlp_ratio) for _ in range(depth))
        self.enc_norm = nn.LayerNorm(D, eps=1e-6)
        self.encoder_to_decoder = nn.Linear(D, Dd, bias=False)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, Dd))
        self.decoder = nn.ModuleList(Block(Dd, Hd, mlp_ratio) for _ in range(dec_depth))
        self.dec_norm = nn.LayerNorm(Dd, eps=1e-6)
        self.head = nn.Linear(Dd, 3 * TUBELET * patch * patch)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(self.mask_token, std=0.02, a=-0.02, b=0.02)

    def forward(self, videos, mask):
        B = videos.shape[0]
        x = self.patch_embed(videos).flatten(2).transpose(1, 2) + self.pos_enc  # [B, N, D]
        x = x[~mask].reshape(B, -1, x.shape[-1])
        for blk in self.encoder:
            x = blk(x)
        x = self.encoder_to_decoder(self.enc_norm(x))
        pos = self.pos_dec.expand(B, -1, -1)
        Dd = pos.shape[-1]
        pos_vis, pos_mask = pos[~mask].reshape(B, -1, Dd), pos[mask].reshape(B, -1, Dd)
        x = torch.cat([x + pos_vis, self.mask_token + pos_mask], dim=1)
        for blk in self.decoder:
            x = blk(x)
        return self.head(self.dec_norm(x[:, -pos_mask.shape[1]:]))

    def target(self, videos, mask):
        """The normalised-pixel target of the masked tokens [B, N_masked, tt * p * p * 3]."""
        with torch.no_grad():
            mean = torch.tensor(MEAN, device=videos.device).view(1, 3, 1, 1, 1)
            std = torch.tensor(STD, device=videos.device).view(1, 3, 1, 1, 1)
            v = videos.float() * std + mean
            B, C, T, Hh, W = v.shape
            p = self.patch
            # b c (t p0) (h p1) (w p2) -> b (t h w) (p0 p1 p2) c
            v = v.reshape(B, C, T // TUBELET, TUBELET, Hh // p, p, W // p, p)
            v = v.permute(0, 2, 4, 6, 3, 5, 7, 1).reshape(B, -1, TUBELET * p * p, C)
            v = (v - v.mean(dim=-2, keepdim=True)) / (v.var(dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6)
            v = v.reshape(B, v.shape[1], -1)  # b n (p c)
            return v[mask].reshape(B, -1, v.shape[-1])


def tube_masks(grid_t, grid_hw, ratio, batch, rng):
    """u8-style bool [batch, tokens]: int(ratio * H'W') random spatial positions, all time slots."""
    per = grid_hw * grid_hw
    masked = int(ratio * per)
    out = np.zeros((batch, grid_t, per), dtype=bool)
    for b in range(batch):
        out[b, :, rng.permutation(per)[:masked]] = True
    return torch.from_numpy(out.reshape(batch, -1))


def layer_flops(n, d, i):
    return 2.0 * n * (4.0 * d * d + 2.0 * d * i) + 4.0 * n * n * d


def forward_flops_per_clip(D, depth, Dd, dec_depth, mlp_ratio, patch, frames, img, ratio):
    """video/videomae_flops.h: matmuls only, multiply-add = 2, patch embed over all tokens."""
    per = (img // patch) ** 2
    N = (frames // TUBELET) * per
    V = (frames // TUBELET) * (per - int(ratio * per))
    R, P = N - V, 3 * TUBELET * patch * patch
    return (2.0 * N * P * D + depth * layer_flops(V, D, int(D * mlp_ratio)) + 2.0 * V * D * Dd
            + dec_depth * layer_flops(V + R, Dd, int(Dd * mlp_ratio)) + 2.0 * R * Dd * P)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="vit-s", choices=sorted(SIZES))
    ap.add_argument("--batch", default="4")
    ap.add_argument("--frames", type=int, default=0)
    ap.add_argument("--img", type=int, default=0)
    ap.add_argument("--mask-ratio", type=float, default=0.9)
    ap.add_argument("--decoder-depth", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-gflops", type=float, default=0.0, help="peak for MFU (0: no MFU)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16"])
    ap.add_argument("--attention", default="auto", choices=["auto", "eager", "sdpa"],
                    help="auto: sdpa when this torch has it")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = ap.parse_args(argv)
    global USE_SDPA
    has_sdpa = hasattr(F, "scaled_dot_product_attention")
    if a.attention == "sdpa" and not has_sdpa:
        ap.error(f"--attention sdpa: torch {torch.__version__} has no F.scaled_dot_product_attention (>= 2.0)")
    USE_SDPA = a.attention == "sdpa" or (a.attention == "auto" and has_sdpa)
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device")
    if a.device == "cpu" and a.precision == "tf32":
        ap.error("--precision tf32 needs --device cuda")
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    D, depth, H, Dd, Hd, mlp_ratio, patch, frames0, img0 = SIZES[a.model]
    frames, img = a.frames or frames0, a.img or img0
    model = VideoMAEPretrain(D, depth, H, Dd, Hd, mlp_ratio, patch, frames, img, a.decoder_depth).to(dev).train()
    fwd_model = torch.compile(model) if a.compile else model
    autocast = (torch.autocast(device_type=a.device, dtype=torch.bfloat16) if a.precision == "bf16"
                else torch.autocast(device_type=a.device, enabled=False))
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    devices = f"1x {torch.cuda.get_device_name()}" if a.device == "cuda" else f"CPU ({a.threads} threads)"
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and not n.endswith(".bias"))]
    lr = 1.2e-3
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8)
    num_params = sum(p.numel() for p in model.parameters())
    grid_t, grid_hw = frames // TUBELET, img // patch
    rng = np.random.default_rng(a.seed)
    fwd = forward_flops_per_clip(D, depth, Dd, a.decoder_depth, mlp_ratio, patch, frames, img, a.mask_ratio)
    for B in [int(b) for b in a.batch.split(",")]:
        pixels = torch.from_numpy(rng.random((B, 3, frames, img, img), dtype=np.float32))
        videos = (pixels - torch.tensor(MEAN).view(1, 3, 1, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1, 1)
        videos = videos.to(dev)
        masks = [tube_masks(grid_t, grid_hw, a.mask_ratio, B, rng).to(dev) for _ in range(a.warmup + a.steps)]
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times, loss = [], float("nan")
        for i in range(a.warmup + a.steps):
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast:
                pred = fwd_model(videos, masks[i])
                out = F.mse_loss(pred.float(), model.target(videos, masks[i]))
            out.backward()
            opt.step()
            sync()
            dt = time.perf_counter() - t0
            loss = float(out.detach())
            if i >= a.warmup:
                times.append(dt)
        times.sort()
        med = times[len(times) // 2]
        step_flops = 3.0 * fwd * B
        gflops = step_flops / med / 1e9
        N = grid_t * grid_hw * grid_hw
        Nm = grid_t * int(a.mask_ratio * grid_hw * grid_hw)
        print(json.dumps({
            "engine": "pytorch", "model": a.model, "devices": devices, "dataset": "synthetic",
            "dtype": a.precision, "device": a.device, "attention": "sdpa" if USE_SDPA else "eager",
            "compile": a.compile, "batch": B, "frames": frames, "img": img, "mask_ratio": a.mask_ratio,
            "decoder_depth": a.decoder_depth, "tokens": N, "visible_tokens": N - Nm, "masked_tokens": Nm,
            "params": num_params, "model_gflops_per_clip": fwd / 1e9, "step_gflop": step_flops / 1e9,
            "executed_step_gflop": step_flops / 1e9, "videos_per_s": B / med, "step_ms": med * 1e3,
            "step_ms_min": times[0] * 1e3, "step_ms_max": times[-1] * 1e3, "gflop_per_s": gflops,
            "mfu_pct": 100.0 * gflops / a.peak_gflops if a.peak_gflops > 0 else 0.0,
            "executed_mfu_pct": 100.0 * gflops / a.peak_gflops if a.peak_gflops > 0 else 0.0,
            "peak_gflops": a.peak_gflops,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if a.device == "cuda" else 0.0,
            "device_hours_ssv2_1200ep": SSV2_TRAIN_VIDEOS * SSV2_EPOCHS / (B / med) / 3600,
            "threads": a.threads, "steps": a.steps, "warmup": a.warmup, "loss": loss, "optimizer": "adamw",
            "dry_run": False, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
