"""BEVT's Video Swin backbone (SwinTransformerBEVT) in PyTorch, the reference of
tests/test_swin_block.cc (SwinBlock.BackboneMatchesBevtInPyTorch).

Usage: /usr/bin/python3 bevt_backbone_reference.py PARAM_DIR OUT_DIR video|image

Written from the published BEVT code's algorithm, float64 autograd. Reads the parameters the
C++ test wrote (PARAM_DIR/<name>.npy, BEVT's names) and a small config: embed 32, depths
2/2/2/2, heads 1/2/4/8 (head size 32), patch 2 x 4 x 4, window 2 x 4 x 4. video: a [1, 3, 4, 64,
64] clip (tokens 2 x 16 x 16; stage 4's 2 x 2 grid clips the window); image: [2, 3, 128, 128]
(tokens 32 x 32; stage 4 is one 4 x 4 window that still rolls by 2, masked in every block).
Patch embedding (Conv3d / Conv2d k = s), LayerNorm, mask token at the masked tokens
(PARAM_DIR/token_mask.npy, u8 per token), four stages; writes x3, x4 (the stage-3 and stage-4
outputs before merging), their given gradients' results: every parameter's gradient (d_<name>).
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"bevt_backbone_reference.py: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from swin_block_reference import swin_block  # noqa: E402
from window_attention_reference import compute_mask  # noqa: E402

EMBED, DEPTHS, HEADS, PATCH, WINDOW = 32, (2, 2, 2, 2), (1, 2, 4, 8), (2, 4, 4), (2, 4, 4)


def backbone(P, x, token_mask, stream, embed=EMBED, depths=DEPTHS, heads=HEADS, patch=PATCH, window=WINDOW,
             drop=None):
    """SwinTransformerBEVT's forward of one stream: x [B, 3, T, H, W] (images T = 1), token_mask
    [B, D, H/4, W/4] (1 = the mask token); drop: per global block k, (attn [B], mlp [B]) scales
    or None. Returns the stage-3 and stage-4 outputs before merging, [B, D, h, w, C] each."""
    if stream == "video":
        t = F.conv3d(x, P["backbone.patch_embed.proj.weight"], P["backbone.patch_embed.proj.bias"], stride=patch)
        t = t.permute(0, 2, 3, 4, 1)  # [B, D, H, W, C]
        norm = "backbone.patch_embed.norm."
    else:
        t = F.conv2d(x[:, :, 0], P["backbone.patch_embed_2d.proj.weight"], P["backbone.patch_embed_2d.proj.bias"],
                     stride=patch[1:])
        t = t.permute(0, 2, 3, 1).unsqueeze(1)  # [B, 1, H, W, C]
        norm = "backbone.patch_embed_2d.norm."
    t = F.layer_norm(t, (embed,), P[norm + "weight"], P[norm + "bias"], 1e-5)
    if token_mask is not None:  # (None: the fine-tuning model, which has no mask token)
        m = token_mask.reshape(*t.shape[:4], 1).to(t.dtype)
        t = t * (1 - m) + P["backbone.mask_token"].view(1, 1, 1, 1, embed) * m
    outs, k = [], 0
    for i in range(4):
        C, NH = embed << i, heads[i]
        B, D, H, W, _ = t.shape
        if stream == "video":  # get_window_size: clip where the size is at most the window
            ws = tuple(min(s, w) for s, w in zip((D, H, W), window))
            shift = tuple(0 if s <= w else w // 2 for s, w in zip((D, H, W), window))
            mask = compute_mask(D, H, W, ws, shift) if any(shift) else None
            masks = [None, mask]
        else:
            ws, shift = (1, window[1], window[2]), (0, window[1] // 2, window[2] // 2)
            mask = compute_mask(D, H, W, ws, shift)
            masks = [mask, mask]
        for j in range(depths[i]):
            t = swin_block(t, P, f"backbone.layers.{i}.blocks.{j}.", C, NH, ws, shift if j % 2 else (0, 0, 0),
                           masks[j % 2], window, None if drop is None else drop[k])
            k += 1
        outs.append(t)
        if i < 3:
            pre = f"backbone.layers.{i}.downsample."
            mm = torch.cat([t[:, :, 0::2, 0::2], t[:, :, 1::2, 0::2], t[:, :, 0::2, 1::2], t[:, :, 1::2, 1::2]], -1)
            t = F.linear(F.layer_norm(mm, (4 * C,), P[pre + "norm.weight"], P[pre + "norm.bias"], 1e-5),
                         P[pre + "reduction.weight"])
    return outs[2], outs[3]


def main(param_dir, out_dir, stream):
    load = lambda n: torch.from_numpy(np.load(os.path.join(param_dir, n + ".npy")).astype(np.float64))
    names = [l.strip() for l in open(os.path.join(param_dir, "names.txt"))]
    P = {n: torch.nn.Parameter(load(n)) for n in names}
    x = load("input")
    token_mask = torch.from_numpy(np.load(os.path.join(param_dir, "token_mask.npy")).astype(np.float64))
    x3, x4 = backbone(P, x, token_mask, stream)
    g3, g4 = load("g_x3").view_as(x3), load("g_x4").view_as(x4)
    ((x3 * g3).sum() + (x4 * g4).sum()).backward()
    save = lambda n, a: np.save(os.path.join(out_dir, n + ".npy"), a.detach().numpy().astype(np.float32))
    save("x3", x3.reshape(-1, x3.shape[-1]))
    save("x4", x4.reshape(-1, x4.shape[-1]))
    for n, p in P.items():
        save("d_" + n, p.grad if p.grad is not None else torch.zeros_like(p))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
