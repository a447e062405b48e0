"""Video Swin's window attention in PyTorch, the reference of tests/test_window_attention.cc
(WindowAttention.MatchesVideoSwinInPyTorch).

Usage: /usr/bin/python3 window_attention_reference.py OUT_DIR

Written from the published Video Swin / BEVT code's algorithm (swin_transformer.py,
WindowAttention3D, window_partition, compute_mask, get_relative_position_index), float64 with
autograd: a [B, D, H, W, C] volume of q, k, v (already projected) is rolled by -shift, partitioned
into windows (b, wd, wh, ww) with tokens (d, h, w) row-major, and attended with
scale q k^T + table[index] + mask (-100 across the shifted regions), softmax, @ v.
Writes (f32 unless noted) into OUT_DIR:
  q.npy k.npy v.npy dout.npy   [nW*N, NH*HS]  the partitioned rows (window-major, head-major columns)
  bias.npy   [NH, N, N]        table[index] (the op's bias input)
  mask.npy   [nWs, N, N]       the masks of one sample's windows
  index.npy  [N*N] int64       the relative-position index
  partition.npy [nW*N] int64   the volume token (b D H W + (d H + h) W + w) each row came from
  out.npy dq.npy dk.npy dv.npy [nW*N, NH*HS]  out and the gradients of sum(out * dout)
  dtable.npy [T, NH]           the gradient of the relative_position_bias_table
Exits with status 77 when torch or numpy cannot be imported.
"""
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"window_attention_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def window_partition(x, ws):
    B, D, H, W, C = x.shape
    x = x.view(B, D // ws[0], ws[0], H // ws[1], ws[1], W // ws[2], ws[2], C)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).contiguous().view(-1, ws[0] * ws[1] * ws[2], C)


def compute_mask(D, H, W, ws, ss):
    img_mask = torch.zeros((1, D, H, W, 1), dtype=torch.float64)
    cnt = 0
    for d in (slice(-ws[0]), slice(-ws[0], -ss[0]), slice(-ss[0], None)):
        for h in (slice(-ws[1]), slice(-ws[1], -ss[1]), slice(-ss[1], None)):
            for w in (slice(-ws[2]), slice(-ws[2], -ss[2]), slice(-ss[2], None)):
                img_mask[:, d, h, w, :] = cnt
                cnt += 1
    mask_windows = window_partition(img_mask, ws).squeeze(-1)
    attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)


def relative_position_index(ws):
    coords = torch.stack(torch.meshgrid(torch.arange(ws[0]), torch.arange(ws[1]), torch.arange(ws[2]), indexing="ij"))
    flat = torch.flatten(coords, 1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += ws[0] - 1
    rel[:, :, 1] += ws[1] - 1
    rel[:, :, 2] += ws[2] - 1
    rel[:, :, 0] *= (2 * ws[1] - 1) * (2 * ws[2] - 1)
    rel[:, :, 1] *= 2 * ws[2] - 1
    return rel.sum(-1)


def main(out_dir):
    torch.manual_seed(20261128)
    B, D, H, W = 2, 4, 14, 14
    ws, ss = (2, 7, 7), (1, 3, 3)
    NH, HS = 2, 32
    C = NH * HS
    N = ws[0] * ws[1] * ws[2]
    T = (2 * ws[0] - 1) * (2 * ws[1] - 1) * (2 * ws[2] - 1)
    f64 = torch.float64
    # values that f32 holds exactly, so that the f32 engine and this float64 run see the same inputs
    vol = [torch.randn(B, D, H, W, C, dtype=f64).float().double() for _ in range(3)]
    table = torch.nn.Parameter((torch.randn(T, NH, dtype=f64) * 0.5).float().double())
    index = relative_position_index(ws)
    mask = compute_mask(D, H, W, ws, ss)  # [nWs, N, N]
    # roll, partition: rows [B*nWs, N, C]
    q, k, v = (window_partition(torch.roll(x, shifts=(-ss[0], -ss[1], -ss[2]), dims=(1, 2, 3)), ws) for x in vol)
    q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
    nW = q.shape[0]
    heads = lambda t: t.reshape(nW, N, NH, HS).permute(0, 2, 1, 3)  # [nW, NH, N, HS]
    scale = HS ** -0.5
    attn = (heads(q) * scale) @ heads(k).transpose(-2, -1)
    bias = table[index.reshape(-1)].reshape(N, N, NH).permute(2, 0, 1)  # [NH, N, N]
    attn = attn + bias.unsqueeze(0)
    nWs = mask.shape[0]
    attn = attn.view(nW // nWs, nWs, NH, N, N) + mask.unsqueeze(1).unsqueeze(0)
    attn = torch.softmax(attn.view(nW, NH, N, N), dim=-1)
    out = (attn @ heads(v)).transpose(1, 2).reshape(nW, N, C)
    dout = torch.randn_like(out).float().double()
    (out * dout).sum().backward()
    rows = lambda t: t.detach().reshape(nW * N, C).numpy().astype(np.float32)
    save = lambda name, a: np.save(os.path.join(out_dir, name + ".npy"), a)
    save("q", rows(q)); save("k", rows(k)); save("v", rows(v)); save("dout", rows(dout))
    save("bias", bias.detach().numpy().astype(np.float32))
    save("mask", mask.numpy().astype(np.float32))
    save("index", index.reshape(-1).numpy().astype(np.int64))
    ids = torch.arange(B * D * H * W, dtype=f64).view(B, D, H, W, 1)
    ids = window_partition(torch.roll(ids, shifts=(-ss[0], -ss[1], -ss[2]), dims=(1, 2, 3)), ws)
    save("partition", ids.reshape(-1).numpy().astype(np.int64))
    save("out", rows(out)); save("dq", rows(q.grad)); save("dk", rows(k.grad)); save("dv", rows(v.grad))
    save("dtable", table.grad.detach().numpy().astype(np.float32))
    print(f"video swin reference: {nW} windows of {N} tokens, {NH} heads, masks {nWs}, table {T}")


if __name__ == "__main__":
    main(sys.argv[1])
