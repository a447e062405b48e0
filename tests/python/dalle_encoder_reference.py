"""The DALL-E dVAE encoder in PyTorch, the reference of tests/test_dvae.cc.

Usage: /usr/bin/python3 dalle_encoder_reference.py DIR GROUPS HIDDEN BLOCKS VOCAB

Written from openai/DALL-E's encoder.py algorithm (Conv2d with padding (k - 1) // 2; input 7x7;
groups of EncoderBlocks, id_path + post_gain * res_path(relu, 3x3, relu, 3x3, relu, 3x3, relu,
1x1), max-pool 2 after all groups but the last; output relu + 1x1), float64. Reads DIR/names.txt,
DIR/<name>.npy (DALL-E's state-dict names) and DIR/x.npy; writes DIR/ref_logits.npy.
Also checks torch's own F.conv2d is what it calls (the reference of ops::conv2d): writes
DIR/ref_conv.npy = F.conv2d(x_conv, w_conv, b_conv, stride, padding) for the case in DIR/conv_*.npy.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"dalle_encoder_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def encoder_logits(P, x, groups, blocks):
    """DALL-E's encoder on x [B, 3, H, W] (already mapped) with the state dict P: logits [B, vocab, H/8, W/8]."""
    conv = lambda x, pre: F.conv2d(x, P[pre + ".w"], P[pre + ".b"], padding=(P[pre + ".w"].shape[-1] - 1) // 2)
    post_gain = 1 / (groups * blocks) ** 2
    h = conv(x, "blocks.input")
    for g in range(1, groups + 1):
        for i in range(1, blocks + 1):
            pre = f"blocks.group_{g}.block_{i}."
            r = h
            for k in range(1, 5):
                r = conv(F.relu(r), pre + f"res_path.conv_{k}")
            idp = conv(h, pre + "id_path") if pre + "id_path.w" in P else h
            h = idp + post_gain * r
        if g < groups:
            h = F.max_pool2d(h, kernel_size=2)
    return conv(F.relu(h), "blocks.output.conv")


def main(d, groups, hidden, blocks, vocab):
    load = lambda n: torch.from_numpy(np.load(os.path.join(d, n + ".npy")).astype(np.float64))
    names = [l.strip() for l in open(os.path.join(d, "names.txt"))]
    P = {n: load(n) for n in names}
    logits = encoder_logits(P, load("x"), groups, blocks)
    np.save(os.path.join(d, "ref_logits.npy"), logits.numpy().astype(np.float32))
    cx, cw, cb = load("conv_x"), load("conv_w"), load("conv_b")
    stride, pad = [int(v) for v in np.load(os.path.join(d, "conv_args.npy"))]
    np.save(os.path.join(d, "ref_conv.npy"), F.conv2d(cx, cw, cb, stride=stride, padding=pad).numpy().astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1], *[int(a) for a in sys.argv[2:6]])
