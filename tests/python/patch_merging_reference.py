"""Video Swin's PatchMerging in PyTorch, the reference of tests/test_swin_block.cc
(SwinBlock.PatchMergingMatchesVideoSwin).

Usage: /usr/bin/python3 patch_merging_reference.py OUT_DIR

x [B, D, H, W, C] -> cat(x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2], x[:, :, 0::2, 1::2],
x[:, :, 1::2, 1::2]) -> LayerNorm(4C) -> Linear(4C, 2C, no bias), float64 with autograd on
f32-exact values. Writes (f32) x, dout, out, dx [rows, channels] in volume order, and
norm.weight, norm.bias, reduction.weight with their gradients (d_ prefix).
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"patch_merging_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def main(out_dir):
    torch.manual_seed(20261129)
    B, D, H, W, C = 2, 3, 6, 4, 16
    exact = lambda t: t.float().double()
    x = exact(torch.randn(B, D, H, W, C, dtype=torch.float64)).requires_grad_(True)
    P = {"norm.weight": torch.nn.Parameter(exact(1 + 0.3 * torch.randn(4 * C, dtype=torch.float64))),
         "norm.bias": torch.nn.Parameter(exact(0.3 * torch.randn(4 * C, dtype=torch.float64))),
         "reduction.weight": torch.nn.Parameter(exact(0.2 * torch.randn(2 * C, 4 * C, dtype=torch.float64)))}
    m = torch.cat([x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2], x[:, :, 0::2, 1::2], x[:, :, 1::2, 1::2]], -1)
    out = F.linear(F.layer_norm(m, (4 * C,), P["norm.weight"], P["norm.bias"], 1e-5), P["reduction.weight"])
    dout = exact(torch.randn_like(out))
    (out * dout).sum().backward()
    save = lambda n, t: np.save(os.path.join(out_dir, n + ".npy"), t.detach().numpy().astype(np.float32))
    save("x", x.reshape(-1, C)); save("dx", x.grad.reshape(-1, C))
    save("out", out.reshape(-1, 2 * C)); save("dout", dout.reshape(-1, 2 * C))
    for n, p in P.items():
        save(n, p); save("d_" + n, p.grad)


if __name__ == "__main__":
    main(sys.argv[1])
