"""torchvision's own 2-D Swin block (torchvision.models.swin_transformer.SwinTransformerBlock, as
swin_t builds it), the independent reference of tests/test_swin_block.cc
(SwinBlock.MatchesTorchvisionSwinT).

Usage: /usr/bin/python3 torchvision_swin_block_reference.py OUT_DIR SHIFT

A block of width 64, 2 heads, window 7 x 7, shift SHIFT (0 or 3) on x [2, 14, 14, 64], with
random weights, non-zero biases and LayerNorm parameters, float64; forward and backward of
sum(out * dout). Writes, under Video Swin's names (torchvision's mlp.0 / mlp.3 are mlp.fc1 /
mlp.fc2), every parameter and its gradient, x, dout, out and dx as token rows (the volume
[2, 1, 14, 14]), f32-exact.
"""
import os
import sys

try:
    import numpy as np
    import torch
    from torchvision.models.swin_transformer import SwinTransformerBlock
except ImportError as e:
    print(f"torchvision_swin_block_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def main(out_dir, shift):
    torch.manual_seed(77 + shift)
    B, H, W, C, NH = 2, 14, 14, 64, 2
    block = SwinTransformerBlock(C, NH, window_size=[7, 7], shift_size=[shift, shift]).double()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if p.dim() == 2 and "relative_position" not in name:
                p.copy_(0.2 * torch.randn_like(p))
            else:  # biases, LayerNorms and the table: non-zero, so every gradient is exercised
                p.copy_((1.0 if name.startswith("norm") and name.endswith("weight") else 0.0) + 0.5 * torch.randn_like(p))
            p.copy_(p.float().double())
    x = torch.randn(B, H, W, C, dtype=torch.float64).float().double().requires_grad_(True)
    out = block(x)
    dout = torch.randn_like(out).float().double()
    (out * dout).sum().backward()
    rename = {"mlp.0.weight": "mlp.fc1.weight", "mlp.0.bias": "mlp.fc1.bias", "mlp.3.weight": "mlp.fc2.weight",
              "mlp.3.bias": "mlp.fc2.bias"}
    save = lambda name, t: np.save(os.path.join(out_dir, name + ".npy"), t.detach().numpy().astype(np.float32))
    rows = lambda t: t.reshape(-1, C)
    save("x", rows(x)), save("dout", rows(dout)), save("out", rows(out)), save("dx", rows(x.grad))
    for name, p in block.named_parameters():
        save(rename.get(name, name), p)
        save("d_" + rename.get(name, name), p.grad)
    print(f"torchvision SwinTransformerBlock: {B * 4} windows of 49 tokens, shift {shift}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
