"""Video Swin's SwinTransformerBlock3D in PyTorch, the reference of tests/test_swin_block.cc.

Usage: /usr/bin/python3 swin_block_reference.py OUT_DIR SHIFT_D SHIFT_H SHIFT_W

Written from the published Video Swin / BEVT code's algorithm (swin_transformer.py,
SwinTransformerBlock3D.forward_part1/part2, WindowAttention3D, compute_mask), float64 with
autograd, no drop path: x [B, D, H, W, C] -> LN1 -> roll by -shift -> windows -> qkv (with bias),
scale q k^T + table[index] (+ the -100 masks when shifted), softmax, @ v, proj -> windows back,
roll by +shift -> + x -> + fc2(gelu(fc1(LN2(.)))). Values are made f32-exact first, so an f32
engine and this run see the same inputs. Writes into OUT_DIR (f32; rows are the volume's tokens
b D H W + (d H + h) W + w):
  x.npy dout.npy out.npy dx.npy   [B D H W, C]
  <param>.npy and d_<param>.npy   for norm1.weight norm1.bias attn.qkv.weight attn.qkv.bias
      attn.proj.weight attn.proj.bias norm2.weight norm2.bias mlp.fc1.weight mlp.fc1.bias
      mlp.fc2.weight mlp.fc2.bias attn.relative_position_bias_table (names as in the checkpoint)
Exits with status 77 when torch or numpy cannot be imported.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"swin_block_reference.py: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from window_attention_reference import compute_mask, relative_position_index, window_partition  # noqa: E402


def window_reverse(windows, ws, B, D, H, W):
    x = windows.view(B, D // ws[0], H // ws[1], W // ws[2], ws[0], ws[1], ws[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).contiguous().view(B, D, H, W, -1)


def swin_block(x, P, pre, C, NH, ws, shift, mask, table_ws, drop=None, attend=None):
    """One SwinTransformerBlock3D on x [B, D, H, W, C] with parameters P[pre + name]: LN1, roll by
    -shift (when any), windows of ws, qkv with bias, scale q k^T + table[index[:N, :N]] of a
    table_ws window (+ mask[w mod M] when given), softmax, @ v, proj, windows back, roll back,
    residual, then LN2 + MLP with its residual. The mask is applied whenever given (BEVT's image
    stream passes it to unshifted blocks too). drop: per-sample scales (attn [B], mlp [B]) of the
    two branches (drop path), or None. attend(q, k, v, bias) -> [nW, NH, N, HS], with bias [nW or 1,
    NH, N, N] the table's bias plus the mask, replaces the explicit softmax (a benchmark's SDPA)."""
    B, D, H, W, _ = x.shape
    N = ws[0] * ws[1] * ws[2]
    index = relative_position_index(table_ws)[:N, :N].reshape(-1)
    h = F.layer_norm(x, (C,), P[pre + "norm1.weight"], P[pre + "norm1.bias"], 1e-5)
    if any(shift):
        h = torch.roll(h, shifts=tuple(-s for s in shift), dims=(1, 2, 3))
    win = window_partition(h, ws)  # [nW, N, C]
    nW = win.shape[0]
    qkv = F.linear(win, P[pre + "attn.qkv.weight"], P[pre + "attn.qkv.bias"]).reshape(nW, N, 3, NH, C // NH)
    qkv = qkv.permute(2, 0, 3, 1, 4)
    bias = P[pre + "attn.relative_position_bias_table"][index].reshape(N, N, NH).permute(2, 0, 1).unsqueeze(0)
    if attend is None:
        attn = (qkv[0] * (C // NH) ** -0.5) @ qkv[1].transpose(-2, -1) + bias
        if mask is not None:
            nWs = mask.shape[0]
            attn = (attn.view(nW // nWs, nWs, NH, N, N) + mask.to(attn.dtype).unsqueeze(1).unsqueeze(0)).view(nW, NH, N, N)
        o = (torch.softmax(attn, dim=-1) @ qkv[2]).transpose(1, 2).reshape(nW, N, C)
    else:
        if mask is not None:
            nWs = mask.shape[0]
            bias = (bias.unsqueeze(0) + mask.to(bias.dtype).unsqueeze(1).unsqueeze(0)).expand(nW // nWs, nWs, NH, N, N)
            bias = bias.reshape(nW, NH, N, N)
        o = attend(qkv[0], qkv[1], qkv[2], bias).transpose(1, 2).reshape(nW, N, C)
    o = window_reverse(F.linear(o, P[pre + "attn.proj.weight"], P[pre + "attn.proj.bias"]), ws, B, D, H, W)
    if any(shift):
        o = torch.roll(o, shifts=tuple(shift), dims=(1, 2, 3))
    if drop is not None:
        o = o * drop[0].view(B, 1, 1, 1, 1)
    x1 = x + o
    y = F.layer_norm(x1, (C,), P[pre + "norm2.weight"], P[pre + "norm2.bias"], 1e-5)
    m = F.linear(F.gelu(F.linear(y, P[pre + "mlp.fc1.weight"], P[pre + "mlp.fc1.bias"])),
                 P[pre + "mlp.fc2.weight"], P[pre + "mlp.fc2.bias"])
    if drop is not None:
        m = m * drop[1].view(B, 1, 1, 1, 1)
    return x1 + m


def main(out_dir, shift):
    torch.manual_seed(1128 + sum(shift))
    B, D, H, W, C, NH = 2, 4, 14, 14, 64, 2
    ws, I = (2, 7, 7), 4 * 64
    N = ws[0] * ws[1] * ws[2]
    T = (2 * ws[0] - 1) * (2 * ws[1] - 1) * (2 * ws[2] - 1)
    f64 = torch.float64
    exact = lambda t: t.float().double()
    shapes = {
        "norm1.weight": (C,), "norm1.bias": (C,), "attn.qkv.weight": (3 * C, C), "attn.qkv.bias": (3 * C,),
        "attn.proj.weight": (C, C), "attn.proj.bias": (C,), "norm2.weight": (C,), "norm2.bias": (C,),
        "mlp.fc1.weight": (I, C), "mlp.fc1.bias": (I,), "mlp.fc2.weight": (C, I), "mlp.fc2.bias": (C,),
        "attn.relative_position_bias_table": (T, NH),
    }
    P = {}
    for name, shape in shapes.items():
        scale = 0.2 if name.endswith("weight") and len(shape) == 2 else 0.5
        base = 1.0 if name.startswith("norm") and name.endswith("weight") else 0.0
        P[name] = torch.nn.Parameter(exact(base + scale * torch.randn(*shape, dtype=f64)))
    x = exact(torch.randn(B, D, H, W, C, dtype=f64)).requires_grad_(True)
    mask = compute_mask(D, H, W, ws, shift) if any(s > 0 for s in shift) else None

    out = swin_block(x, P, "", C, NH, ws, shift, mask, ws)
    dout = exact(torch.randn_like(out))
    (out * dout).sum().backward()
    save = lambda name, t: np.save(os.path.join(out_dir, name + ".npy"), t.detach().numpy().astype(np.float32))
    rows = lambda t: t.reshape(-1, C)
    save("x", rows(x)); save("dout", rows(dout)); save("out", rows(out)); save("dx", rows(x.grad))
    for name, p in P.items():
        save(name, p)
        save("d_" + name, p.grad)
    print(f"swin block reference: {B * (D // ws[0]) * (H // ws[1]) * (W // ws[2])} windows of {N} tokens, "
          f"shift {tuple(shift)}, C {C}, heads {NH}")


if __name__ == "__main__":
    main(sys.argv[1], [int(a) for a in sys.argv[2:5]])
