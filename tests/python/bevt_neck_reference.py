"""BEVT's necks and shared head in PyTorch, the reference of tests/test_swin_block.cc
(SwinBlock.NeckAndHeadMatchBevtInPyTorch).

Usage: /usr/bin/python3 bevt_neck_reference.py DIR video|image

Written from the published BEVT code's algorithm (swin_transformer_bevt.py necks,
bevt_multisource_head.py), float64 autograd. Reads from DIR (written by the C++ test): names.txt
and <name>.npy (the neck, head and backbone.norm parameters under BEVT's names), x3.npy and
x4.npy (token rows in volume order), size4.npy (B, D, H4, W4), targets.npy (int32 per output
token, -1 = not masked). Image: x4 [B, 8C, H4, W4] -> fpn.0 (ConvTranspose2d k = s = 2) ->
channel-last cat with x3 -> lm_down -> norm -> lm_head; video: fpn_s.0 (ConvTranspose3d
(1, 2, 2)) -> cat -> lm_down_st.0 -> fpn_t.0 (ConvTranspose3d (2, 1, 1)) -> norm -> lm_head.
Loss: F.cross_entropy over the masked tokens (mean). Writes loss.npy, logits.npy, d_x3.npy,
d_x4.npy and d_<name>.npy.
"""
import os
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"bevt_neck_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def neck_head(P, v3, v4, stream, rows=None):
    """The neck and head on x3 [B, D, H3, W3, 4C] and x4 [B, D, H4, W4, 8C]: logits [rows, vocab],
    rows in volume order (video: [B, 2 D, H3, W3]); with `rows` (a bool or index selection of
    those rows) the norm and the head run on the selected rows only."""
    C8 = v4.shape[-1]
    v4 = v4.permute(0, 4, 1, 2, 3)  # [B, 8C, D, H4, W4]
    if stream == "image":
        up = F.conv_transpose2d(v4[:, :, 0], P["backbone.fpn.0.weight"], P["backbone.fpn.0.bias"], stride=2)
        up = up.permute(0, 2, 3, 1).unsqueeze(1)  # [B, 1, H3, W3, 8C]
        h = F.linear(torch.cat([v3, up], -1), P["backbone.lm_down.weight"], P["backbone.lm_down.bias"])
    else:
        up = F.conv_transpose3d(v4, P["backbone.fpn_s.0.weight"], P["backbone.fpn_s.0.bias"], stride=(1, 2, 2))
        up = up.permute(0, 2, 3, 4, 1)
        h = F.linear(torch.cat([v3, up], -1), P["backbone.lm_down_st.0.weight"], P["backbone.lm_down_st.0.bias"])
        h = F.conv_transpose3d(h.permute(0, 4, 1, 2, 3), P["backbone.fpn_t.0.weight"], P["backbone.fpn_t.0.bias"],
                               stride=(2, 1, 1)).permute(0, 2, 3, 4, 1)
    if rows is not None:
        h = h.reshape(-1, C8)[rows]
    h = F.layer_norm(h, (C8,), P["backbone.norm.weight"], P["backbone.norm.bias"], 1e-5)
    return F.linear(h, P["cls_head.lm_head.weight"], P["cls_head.lm_head.bias"]).reshape(-1, P["cls_head.lm_head.weight"].shape[0])


def main(d, stream):
    load = lambda n: torch.from_numpy(np.load(os.path.join(d, n + ".npy")).astype(np.float64))
    names = [l.strip() for l in open(os.path.join(d, "names.txt"))]
    P = {n: torch.nn.Parameter(load(n)) for n in names}
    B, D, H4, W4 = [int(v) for v in np.load(os.path.join(d, "size4.npy"))]
    x3 = load("x3").requires_grad_(True)
    x4 = load("x4").requires_grad_(True)
    C8 = x4.shape[1]
    logits = neck_head(P, x3.view(B, D, 2 * H4, 2 * W4, C8 // 2), x4.view(B, D, H4, W4, C8), stream)
    targets = torch.from_numpy(np.load(os.path.join(d, "targets.npy")).astype(np.int64))
    sel = targets >= 0
    loss = F.cross_entropy(logits[sel], targets[sel])
    loss.backward()
    save = lambda n, a: np.save(os.path.join(d, n + ".npy"), a.detach().numpy().astype(np.float32))
    save("ref_logits", logits)
    np.save(os.path.join(d, "ref_loss.npy"), np.array([loss.item()]))
    save("d_x3", x3.grad); save("d_x4", x4.grad)
    for n, p in P.items():
        save("d_" + n, p.grad if p.grad is not None else torch.zeros_like(p))  # the other stream's neck


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
