"""One stage of BEVT's Video Swin (SwinTransformerBEVT's BasicLayer) in PyTorch, the reference of
tests/test_swin_block.cc (SwinBlock.StageMatchesBevtInPyTorch).

Usage: /usr/bin/python3 swin_stage_reference.py OUT_DIR video|image

Written from the published BEVT code's algorithm, float64 autograd on f32-exact values: two
blocks (the second shifted) and patch merging over a 2 x D x 14 x 14 x 32 volume, 2 heads,
configured window (8, 7, 7).
  video: D = 4, so Video Swin's get_window_size clips the window to (4, 7, 7) and the shift to
         (0, 3, 3); the -100 masks only in the shifted block.
  image: D = 1, 7 x 7 windows, shift 3 in the second block, the shift-3 masks in BOTH blocks,
         the bias from the first 49 x 49 of the 8 x 7 x 7 index (BEVT's image stream).
Writes (f32) x, out (the blocks' output), merged (after patch merging), dout, dmerged, dx, and
every parameter with its gradient (d_ prefix): blocks.J.<name>, downsample.norm.weight,
downsample.norm.bias, downsample.reduction.weight.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"swin_stage_reference.py: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swin_block_reference import swin_block  # noqa: E402
from window_attention_reference import compute_mask  # noqa: E402

C, NH, TABLE_WS = 32, 2, (8, 7, 7)


def main(out_dir, stream):
    torch.manual_seed(2026 if stream == "video" else 2027)
    B, D, H, W = 2, (4 if stream == "video" else 1), 14, 14
    T = (2 * 8 - 1) * 13 * 13
    exact = lambda t: t.float().double()
    shapes = {"norm1.weight": (C,), "norm1.bias": (C,), "attn.qkv.weight": (3 * C, C), "attn.qkv.bias": (3 * C,),
              "attn.proj.weight": (C, C), "attn.proj.bias": (C,), "norm2.weight": (C,), "norm2.bias": (C,),
              "mlp.fc1.weight": (4 * C, C), "mlp.fc1.bias": (4 * C,), "mlp.fc2.weight": (C, 4 * C), "mlp.fc2.bias": (C,),
              "attn.relative_position_bias_table": (T, NH)}
    P = {}
    for j in range(2):
        for name, shape in shapes.items():
            base = 1.0 if name.startswith("norm") and name.endswith("weight") else 0.0
            scale = 0.2 if len(shape) == 2 and "table" not in name else 0.5
            P[f"blocks.{j}.{name}"] = torch.nn.Parameter(exact(base + scale * torch.randn(*shape, dtype=torch.float64)))
    P["downsample.norm.weight"] = torch.nn.Parameter(exact(1 + 0.3 * torch.randn(4 * C, dtype=torch.float64)))
    P["downsample.norm.bias"] = torch.nn.Parameter(exact(0.3 * torch.randn(4 * C, dtype=torch.float64)))
    P["downsample.reduction.weight"] = torch.nn.Parameter(exact(0.2 * torch.randn(2 * C, 4 * C, dtype=torch.float64)))
    x = exact(torch.randn(B, D, H, W, C, dtype=torch.float64)).requires_grad_(True)
    if stream == "video":
        ws, shift = (4, 7, 7), (0, 3, 3)  # get_window_size((4, 14, 14), (8, 7, 7), (4, 3, 3))
        mask = compute_mask(D, H, W, ws, shift)
        masks = [None, mask]
    else:
        ws, shift = (1, 7, 7), (0, 3, 3)
        mask = compute_mask(D, H, W, ws, shift)
        masks = [mask, mask]
    h = x
    for j in range(2):
        h = swin_block(h, P, f"blocks.{j}.", C, NH, ws, shift if j % 2 else (0, 0, 0), masks[j], TABLE_WS)
    out = h
    m = torch.cat([out[:, :, 0::2, 0::2], out[:, :, 1::2, 0::2], out[:, :, 0::2, 1::2], out[:, :, 1::2, 1::2]], -1)
    merged = F.linear(F.layer_norm(m, (4 * C,), P["downsample.norm.weight"], P["downsample.norm.bias"], 1e-5),
                      P["downsample.reduction.weight"])
    dout, dmerged = exact(torch.randn_like(out)), exact(torch.randn_like(merged))
    ((out * dout).sum() + (merged * dmerged).sum()).backward()
    save = lambda n, t: np.save(os.path.join(out_dir, n + ".npy"), t.detach().numpy().astype(np.float32))
    save("x", x.reshape(-1, C)); save("dx", x.grad.reshape(-1, C))
    save("out", out.reshape(-1, C)); save("dout", dout.reshape(-1, C))
    save("merged", merged.reshape(-1, 2 * C)); save("dmerged", dmerged.reshape(-1, 2 * C))
    for n, p in P.items():
        save(n, p); save("d_" + n, p.grad)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
