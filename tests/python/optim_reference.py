"""torch.optim.AdamW reference for tests/test_optimizer.cc (AdamW.MatchesTorchAdamW).

Usage: /usr/bin/python3 optim_reference.py CASE_DIR [CASE_DIR ...]

Each CASE_DIR holds (written by the C++ test):
  config.json   {"steps": S, "lrs": [S floats], "beta1", "beta2", "eps", "weight_decay",
                 "max_grad_norm", "grad_scale", "decay": [P bools]}
  p{i}.npy      f32 initial value of param i (i < P)
  g{s}_{i}.npy  f32 gradient of param i at step s (s < S), before grad_scale
and receives
  out_p{i}.npy, out_exp_avg{i}.npy, out_exp_avg_sq{i}.npy   f32 after the S steps
  out_grad_norms.npy                                        f64 [S], norm after grad_scale
Exits with status 77 when torch or numpy cannot be imported (the test then skips).

Each step: p.grad = grad_scale * g; if max_grad_norm > 0, torch.nn.utils.clip_grad_norm_
(whose returned total norm is recorded; without clipping the norm is computed the same way);
the group lr is set to lrs[s]; then AdamW.step(). Params with decay false sit in a
weight_decay 0 group, as DeepLearningExamples' no_decay list does.
"""
import json
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the C++ test skips on this exit status
    print(f"optim_reference.py: {e}", file=sys.stderr)
    sys.exit(77)


def run_case(case_dir):
    with open(os.path.join(case_dir, "config.json")) as f:
        cfg = json.load(f)
    steps, decay = cfg["steps"], cfg["decay"]
    params = [torch.nn.Parameter(torch.from_numpy(np.load(os.path.join(case_dir, f"p{i}.npy"))))
              for i in range(len(decay))]
    groups = [
        {"params": [p for p, d in zip(params, decay) if d], "weight_decay": cfg["weight_decay"]},
        {"params": [p for p, d in zip(params, decay) if not d], "weight_decay": 0.0},
    ]
    groups = [g for g in groups if g["params"]]
    opt = torch.optim.AdamW(groups, lr=cfg["lrs"][0], betas=(cfg["beta1"], cfg["beta2"]),
                            eps=cfg["eps"], foreach=False)
    scale = torch.tensor(cfg["grad_scale"], dtype=torch.float32)
    norms = []
    for s in range(steps):
        for i, p in enumerate(params):
            g = torch.from_numpy(np.load(os.path.join(case_dir, f"g{s}_{i}.npy")))
            p.grad = g * scale
        if cfg["max_grad_norm"] > 0:
            total = torch.nn.utils.clip_grad_norm_(params, cfg["max_grad_norm"])
        else:
            total = torch.norm(torch.stack([torch.norm(p.grad, 2.0) for p in params]), 2.0)
        norms.append(float(total))
        for group in opt.param_groups:
            group["lr"] = cfg["lrs"][s]
        opt.step()
    for i, p in enumerate(params):
        st = opt.state[p]
        np.save(os.path.join(case_dir, f"out_p{i}.npy"), p.detach().numpy())
        np.save(os.path.join(case_dir, f"out_exp_avg{i}.npy"), st["exp_avg"].numpy())
        np.save(os.path.join(case_dir, f"out_exp_avg_sq{i}.npy"), st["exp_avg_sq"].numpy())
    np.save(os.path.join(case_dir, "out_grad_norms.npy"), np.array(norms, dtype=np.float64))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: optim_reference.py CASE_DIR [CASE_DIR ...]")
    torch.set_num_threads(1)
    for d in sys.argv[1:]:
        run_case(d)
