#!/usr/bin/env bash
# BEVT pretraining from the command line: a tiny joint run (clips + images, synthetic source,
# random tokenizer) whose loss falls; --stop-after + --resume equal the uninterrupted run bit for
# bit; the saved model loads into bevt-step; an mmcv-style .pth written by PyTorch loads too;
# bad input gets a clear error and a non-zero exit.
#   bash tests/cli/test_bevt_cli.sh build/unmask
set -uo pipefail
BIN=${1:-build/unmask}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
TINY=(--size tiny --embed-dim 32 --depths 2,2,2,2 --heads 1,2,4,8 --window 2,4,4 --vocab 64)
RUN=("${TINY[@]}" --frames 4 --crop 128 --clips 2 --images 4 --accumulation 2 --lr 1e-3 --warmup 0.1 --drop-path 0.1 --seed 2 --quiet)

# 1. A short run: loss falls; model/ written in BEVT's names.
"$BIN" pretrain-bevt --output "$T/a" "${RUN[@]}" --steps 6 >"$T/a.out" 2>"$T/a.err" && ok || bad "pretrain-bevt: $(tail -3 "$T/a.err")"
/usr/bin/python3 - "$T/a/metrics.jsonl" <<'PY' && ok || bad "the loss did not fall over 6 steps"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 6 and rows[-1]["loss"] < 0.8 * rows[0]["loss"], [r["loss"] for r in rows]
assert all(k in rows[0] for k in ("video_loss", "image_loss", "video_mask_acc", "image_mask_acc", "majority_acc", "context_acc"))
PY
grep -q '"backbone.layers.3.blocks.1.attn.relative_position_bias_table"' <(head -c 200000 "$T/a/model/model.safetensors") \
  && grep -q '"vocab_size": 64' "$T/a/model/config.json" && ok || bad "model/ lacks BEVT's names or its config"

# 2. Interrupted at step 3 and resumed: the same losses, bit for bit.
"$BIN" pretrain-bevt --output "$T/b" "${RUN[@]}" --steps 6 --stop-after 3 >/dev/null 2>"$T/b.err" && ok || bad "stop-after: $(tail -2 "$T/b.err")"
"$BIN" pretrain-bevt --output "$T/b" "${RUN[@]}" --steps 6 --resume >/dev/null 2>"$T/b2.err" && ok || bad "resume: $(tail -2 "$T/b2.err")"
/usr/bin/python3 - "$T/a/metrics.jsonl" "$T/b/metrics.jsonl" <<'PY' && ok || bad "the resumed run differs from the uninterrupted one"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert a == b, (a, b)
PY
cmp -s "$T/a/model/model.safetensors" "$T/b/model/model.safetensors" && ok || bad "the resumed run's final weights differ"

# 2b. Dynamic loss scaling (what --precision fp16 needs on a GPU): in fp32 a power-of-two scale and
# its inverse are exact, so the losses and the final weights are the unscaled run's, bit for bit.
"$BIN" pretrain-bevt --output "$T/ls" "${RUN[@]}" --steps 6 --loss-scaling dynamic --init-loss-scale 1024 >/dev/null \
  2>"$T/ls.err" && ok || bad "--loss-scaling dynamic: $(tail -2 "$T/ls.err")"
/usr/bin/python3 - "$T/a/metrics.jsonl" "$T/ls/metrics.jsonl" <<'PY' && ok || bad "loss scaling changed the run"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]
b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert a == b, (a, b)
PY
cmp -s "$T/a/model/model.safetensors" "$T/ls/model/model.safetensors" && ok || bad "loss scaling changed the weights"

# 3. The saved model and an mmcv-style torch.save checkpoint load into bevt-step alike.
"$BIN" bevt-step "${TINY[@]}" --weights "$T/a/model" --seed 4 --output "$T/s1" >"$T/s1.out" 2>"$T/s1.err" \
  && grep -q "loaded 136 tensors" "$T/s1.err" && ok || bad "bevt-step --weights model/: $(tail -3 "$T/s1.err")"
/usr/bin/python3 - "$T/s1/params.safetensors" "$T/ckpt.pth" <<'PY' && ok || bad "writing the mmcv checkpoint"
import sys, torch
sys.path.insert(0, "tests/python")
import st_io
import numpy as np
t, _ = st_io.read_safetensors(sys.argv[1])
sd = {"module." + k: torch.from_numpy(np.asarray(v.data).reshape(v.shape).copy()) for k, v in t.items()}
sd["module.backbone.layers.0.blocks.0.attn.relative_position_index"] = torch.zeros(16, 16, dtype=torch.long)
sd["module.cls_head.vae_encoder.blocks.input.w"] = torch.zeros(4, 3, 7, 7)
torch.save({"meta": {"epoch": 3}, "state_dict": sd, "optimizer": {"state": {}}}, sys.argv[2])
PY
"$BIN" bevt-step "${TINY[@]}" --weights "$T/ckpt.pth" --seed 4 --output "$T/s2" >"$T/s2.out" 2>"$T/s2.err" && ok \
  || bad "bevt-step --weights ckpt.pth: $(tail -3 "$T/s2.err")"
cmp -s "$T/s1/grads.safetensors" "$T/s2/grads.safetensors" && grep -q "module." "$T/s2.err" \
  && grep -q "tokenizer tensors" "$T/s2.err" && ok || bad "the .pth gave other gradients or no notes: $(cat "$T/s2.err")"

# 3b. The classifier from torchvision's swin3d names (features.*, mlp.0/3, head) in a torch.save
#     file: the same gradients as from BEVT's names.
"$BIN" bevt-step "${TINY[@]}" --classify 5 --clips 2 --perturb --seed 7 --output "$T/c1" >/dev/null 2>"$T/c1.err" \
  && ok || bad "bevt-step --classify: $(tail -2 "$T/c1.err")"
/usr/bin/python3 - "$T/c1/params.safetensors" "$T/tv.pth" <<'PY' && ok || bad "writing the torchvision checkpoint"
import re, sys, torch
sys.path.insert(0, "tests/python")
import st_io
import numpy as np
t, _ = st_io.read_safetensors(sys.argv[1])
def tv(n):  # BEVT name -> torchvision swin3d's
    n = n.replace("cls_head.fc_cls.", "head.").replace("backbone.", "")
    m = re.match(r"layers\.(\d)\.blocks\.(\d+)\.(.*)", n)
    if m:
        rest = m.group(3).replace("mlp.fc1.", "mlp.0.").replace("mlp.fc2.", "mlp.3.")
        return f"features.{2 * int(m.group(1))}.{m.group(2)}.{rest}"
    m = re.match(r"layers\.(\d)\.downsample\.(.*)", n)
    return f"features.{2 * int(m.group(1)) + 1}.{m.group(2)}" if m else n
sd = {tv(k): torch.from_numpy(np.asarray(v.data).reshape(v.shape).copy()) for k, v in t.items()}
sd["features.0.0.attn.relative_position_index"] = torch.zeros(16, dtype=torch.long)
torch.save(sd, sys.argv[2])
PY
"$BIN" bevt-step "${TINY[@]}" --classify 5 --clips 2 --seed 7 --weights "$T/tv.pth" --output "$T/c2" >/dev/null 2>"$T/c2.err" \
  && cmp -s "$T/c1/grads.safetensors" "$T/c2/grads.safetensors" && grep -q "torchvision" "$T/c2.err" && ok \
  || bad "torchvision names: other gradients or no note: $(tail -3 "$T/c2.err")"

# 3c. A 2-D Swin image-stream checkpoint (BEVT's pretrained2d init): patch_embed -> patch_embed_2d
#     and inflated into the 3-D one (/ 2 over the tubelet), each 2-D table tiled over the 3
#     temporal offsets of the 2 x 4 x 4 window.
/usr/bin/python3 - "$T/s1/params.safetensors" "$T/img2d.pth" <<'PY' && ok || bad "writing the 2-D checkpoint"
import sys, torch
sys.path.insert(0, "tests/python")
import st_io
import numpy as np
t, _ = st_io.read_safetensors(sys.argv[1])
sd = {}
for k, v in t.items():
    a = torch.from_numpy(np.asarray(v.data).reshape(v.shape).copy())
    if k.startswith("backbone.patch_embed.") or k.startswith("backbone.fpn") or k.startswith("backbone.lm_down") or k.startswith("cls_head"):
        continue
    n = k.replace("backbone.", "encoder.", 1)
    if k.startswith("backbone.patch_embed_2d."):
        n = "encoder.patch_embed." + k[len("backbone.patch_embed_2d."):]
    if k.endswith("relative_position_bias_table"):
        a = a[49:98].clone()  # the 2-D table: one 7 x 7 offset plane
    if n == "encoder.norm.weight" or n == "encoder.norm.bias":
        n = n.replace("encoder.norm.", "fc_norm.")
    sd[n] = a
torch.save({"model": sd}, sys.argv[2])
PY
"$BIN" bevt-step "${TINY[@]}" --weights "$T/img2d.pth" --output "$T/s3" 2>"$T/s3.err" >/dev/null; rc=$?
# necks and head are absent from an image-stream file: bevt-step needs them, so expect that error...
grep -q "missing backbone.fpn" "$T/s3.err" && ok || bad "bevt-step with a 2-D checkpoint: $(tail -3 "$T/s3.err")"
# ... while pretrain-bevt --init-from takes the backbone (necks and head keep their init)
"$BIN" pretrain-bevt --output "$T/inf" "${RUN[@]}" --steps 1 --init-from "$T/img2d.pth" >/dev/null 2>"$T/inf.err" \
  && grep -q "inflated from 2-D" "$T/inf.err" && ok || bad "pretrain-bevt --init-from 2-D: $(tail -3 "$T/inf.err")"
# the classifier loads it (its head keeps its init); its dumped parameters show the rules
"$BIN" bevt-step "${TINY[@]}" --classify 5 --clips 1 --weights "$T/img2d.pth" --output "$T/c3" >/dev/null 2>"$T/c3.err" \
  && ok || bad "bevt-step --classify --weights 2-D: $(tail -3 "$T/c3.err")"
/usr/bin/python3 - "$T/img2d.pth" "$T/c3/params.safetensors" <<'PY' && ok || bad "the inflation rules"
import sys, torch
sys.path.insert(0, "tests/python")
import st_io
import numpy as np
sd = torch.load(sys.argv[1])["model"]
t, _ = st_io.read_safetensors(sys.argv[2])
got = lambda n: np.asarray(t[n].data).reshape(t[n].shape)
w2d = sd["encoder.patch_embed.proj.weight"].numpy()
assert np.array_equal(got("backbone.patch_embed.proj.weight"), np.repeat(w2d[:, :, None], 2, axis=2) / 2)
tab = sd["encoder.layers.2.blocks.1.attn.relative_position_bias_table"].numpy()
assert np.array_equal(got("backbone.layers.2.blocks.1.attn.relative_position_bias_table"), np.tile(tab, (3, 1)))
assert np.array_equal(got("backbone.norm.weight"), sd["fc_norm.weight"].numpy())
PY
# a 2-D checkpoint of a larger window (a Swin fine-tuned at 384 px): its 11 x 11 tables are
# resized bicubically to the model's 7 x 7 (F.interpolate, as inflate_weights) before tiling
/usr/bin/python3 - "$T/img2d.pth" "$T/img2d_w6.pth" <<'PY' && ok || bad "writing the 6 x 6-window 2-D checkpoint"
import sys, torch
sd = torch.load(sys.argv[1])["model"]
g = torch.Generator().manual_seed(5)
for k in list(sd):
    if k.endswith("relative_position_bias_table"):
        sd[k] = torch.randn(121, sd[k].shape[1], generator=g)
torch.save({"model": sd}, sys.argv[2])
PY
"$BIN" bevt-step "${TINY[@]}" --classify 5 --clips 1 --weights "$T/img2d_w6.pth" --output "$T/c4" >/dev/null 2>"$T/c4.err" \
  && ok || bad "bevt-step --classify --weights 2-D, window 6: $(tail -3 "$T/c4.err")"
/usr/bin/python3 - "$T/img2d_w6.pth" "$T/c4/params.safetensors" <<'PY' && ok || bad "the bicubic table resize"
import sys, torch
import torch.nn.functional as F
sys.path.insert(0, "tests/python")
import st_io
import numpy as np
sd = torch.load(sys.argv[1])["model"]
t, _ = st_io.read_safetensors(sys.argv[2])
n = 0
for k, tab in sd.items():
    if not k.endswith("relative_position_bias_table"):
        continue
    nh = tab.shape[1]
    r = F.interpolate(tab.double().permute(1, 0).reshape(1, nh, 11, 11), size=(7, 7), mode="bicubic")
    want = r.reshape(nh, 49).permute(1, 0).repeat(3, 1).numpy()
    name = "backbone." + k[len("encoder."):]
    got = np.asarray(t[name].data).reshape(t[name].shape)
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 1e-6, (name, err)
    n += 1
assert n == 8, n
PY
# a table that is no square window's (120 rows) is named in a clear error
/usr/bin/python3 - "$T/img2d_w6.pth" "$T/img2d_bad.pth" <<'PY' && ok || bad "writing the 120-row checkpoint"
import sys, torch
sd = torch.load(sys.argv[1])["model"]
k = "encoder.layers.1.blocks.0.attn.relative_position_bias_table"
sd[k] = sd[k][:120].clone()
torch.save({"model": sd}, sys.argv[2])
PY
"$BIN" bevt-step "${TINY[@]}" --classify 5 --clips 1 --weights "$T/img2d_bad.pth" --output "$T/c5" >/dev/null 2>"$T/c5.err"
[ $? -ne 0 ] && grep -q "layers.1.blocks.0.attn.relative_position_bias_table: the file has \[120,2\]" "$T/c5.err" && ok \
  || bad "a 120-row table: no clear error: $(tail -3 "$T/c5.err")"

# 3d. OpenAI's encoder.pkl is torch.save of the whole module (dall_e.encoder.Encoder): read with
#     the pickle reader (nothing run), it tokenizes exactly as its state dict does.
PYTHONPATH=tests/python/dall_e_standin /usr/bin/python3 - "$T" <<'PY' && ok || bad "writing the stand-in encoder.pkl"
import sys, torch
from dall_e.encoder import Encoder
torch.manual_seed(3)
e = Encoder(n_hid=8, n_blk_per_group=1, vocab_size=64)
with torch.no_grad():
    e.blocks.output.conv.b.copy_(torch.randn(64))
torch.save(e, sys.argv[1] + "/encoder.pkl")
torch.save(e.state_dict(), sys.argv[1] + "/encoder_sd.pth")
PY
"$BIN" bevt-step "${TINY[@]}" --tokenizer "$T/encoder.pkl" --seed 4 --output "$T/k1" >/dev/null 2>"$T/k1.err" && ok \
  || bad "bevt-step --tokenizer encoder.pkl: $(tail -3 "$T/k1.err")"
"$BIN" bevt-step "${TINY[@]}" --tokenizer "$T/encoder_sd.pth" --seed 4 --output "$T/k2" >/dev/null 2>"$T/k2.err" && ok \
  || bad "bevt-step --tokenizer state dict: $(tail -3 "$T/k2.err")"
cmp -s "$T/k1/inputs.safetensors" "$T/k2/inputs.safetensors" && cmp -s "$T/k1/grads.safetensors" "$T/k2/grads.safetensors" \
  && ok || bad "encoder.pkl and its state dict tokenize differently"

# 3e. Files instead of the synthetic source: a make-videos list (decoded by FFmpeg) and an
#     ImageNet-style folder of JPEGs (written by OpenCV).
"$BIN" make-videos --output "$T/mv" --videos-per-class 2 --width 160 --height 128 --frames 40 --seed 2 >/dev/null 2>&1 \
  && ok || bad "make-videos"
/usr/bin/python3 - "$T/imgs" <<'PY' && ok || bad "writing the image folder"
import os, sys, cv2, numpy as np
rng = np.random.default_rng(0)
for c in ("n01440764", "n01443537"):
    os.makedirs(os.path.join(sys.argv[1], c), exist_ok=True)
    for k in range(3):
        img = (rng.random((140, 150, 3)) * 255).astype(np.uint8)
        cv2.imwrite(os.path.join(sys.argv[1], c, f"img_{k}.JPEG"), img)
PY
"$BIN" pretrain-bevt --output "$T/files" "${TINY[@]}" --frames 4 --crop 128 --clips 2 --images 4 --steps 2 \
  --data "$T/mv/train_videomae.txt" --image-data "$T/imgs" --frame-interval 4 --seed 1 >"$T/files.out" 2>"$T/files.err" \
  && grep -qE "[0-9]+ videos \+ 6 images" "$T/files.err" && [ "$(wc -l < "$T/files/metrics.jsonl")" = 2 ] && ok \
  || bad "pretrain-bevt on files: $(grep -m1 pretrain-bevt "$T/files.err"; tail -2 "$T/files.err")"
# ... with 3 workers: the same losses (a sample is a function of its index, whoever decodes it)
"$BIN" pretrain-bevt --output "$T/files3" "${TINY[@]}" --frames 4 --crop 128 --clips 2 --images 4 --steps 2 \
  --data "$T/mv/train_videomae.txt" --image-data "$T/imgs" --frame-interval 4 --seed 1 --workers 3 >/dev/null 2>&1 \
  && cmp -s <(cut -d, -f1-3 "$T/files/metrics.jsonl") <(cut -d, -f1-3 "$T/files3/metrics.jsonl") && ok \
  || bad "--workers 3 changed the run: $(cut -c1-80 "$T/files/metrics.jsonl" "$T/files3/metrics.jsonl")"
# ... and bench bevt on them: the loader's rate against the step's
"$BIN" bench bevt "${TINY[@]}" --tokenizer-hidden 16 --tokenizer-blocks 1 --frames 4 --crop 128 --batch-size 2 \
  --max-steps 3 --skip 1 --data "$T/mv/train_videomae.txt" --image-data "$T/imgs" --workers 2 >"$T/bd.out" 2>"$T/bd.err" \
  && grep -qE "^input: [0-9]+ videos \+ 6 images, 2 workers: the loader made [0-9.]+ clips/s \+ [0-9.]+ images/s .*(it keeps up|the input is the bottleneck)" \
  "$T/bd.out" && ok || bad "bench bevt --data: $(tail -2 "$T/bd.out") $(tail -2 "$T/bd.err")"

# 4. Bad input: an error naming the problem, exit 1, no crash.
expect_error() {  # expect_error PATTERN ARGS...
  local pat=$1; shift
  "$BIN" "$@" >"$T/e.out" 2>"$T/e.err"
  local rc=$?
  if [ $rc -eq 1 ] && grep -q -e "$pat" "$T/e.err"; then ok; else bad "$* -> rc $rc: $(head -c 300 "$T/e.err")"; fi
}
expect_error "multiple of 32" pretrain-bevt --output "$T/e1" "${TINY[@]}" --crop 100 --steps 1
expect_error "needs --device cuda" pretrain-bevt --output "$T/e1" "${TINY[@]}" --steps 1 --precision fp16 --loss-scaling dynamic
expect_error "loss-scaling must be none or dynamic" pretrain-bevt --output "$T/e1" "${TINY[@]}" --steps 1 --loss-scaling auto
expect_error "init-loss-scale must be in" pretrain-bevt --output "$T/e1" "${TINY[@]}" --steps 1 --loss-scaling dynamic --init-loss-scale 0
expect_error "split evenly" pretrain-bevt --output "$T/e2" "${TINY[@]}" --crop 128 --frames 4 --clips 3 --images 4 --steps 1
expect_error "does not fit the model" bevt-step --size tiny --window 2,4,4 --vocab 64 --weights "$T/a/model" --output "$T/e3"
expect_error "codes" bevt-step "${TINY[@]}" --vocab 32 --tokenizer "$T/s1/tokenizer.safetensors" --output "$T/e4"
expect_error "neither 'videos' nor 'images'" bevt-step "${TINY[@]}" --inputs "$T/s1/params.safetensors" --output "$T/e5"
expect_error "not divisible" bevt-step --size tiny --embed-dim 30 --heads 4,8,16,32 --output "$T/e6"
expect_error "does not exist" pretrain-bevt --output "$T/e7" "${RUN[@]}" --steps 1 --init-from "$T/nothing.pth"
expect_error "no class folders" pretrain-bevt --output "$T/e9" "${RUN[@]}" --steps 1 --image-data "$T/mv"
expect_error "cannot open" pretrain-bevt --output "$T/e10" "${RUN[@]}" --steps 1 --data "$T/none.txt"
"$BIN" pretrain-bevt --output "$T/a" "${RUN[@]}" --steps 6 >/dev/null 2>"$T/e8.err"; rc=$?
[ $rc -ne 0 ] && grep -qi "already\|--resume\|--force" "$T/e8.err" && ok || bad "a second run into the same --output was not refused (rc $rc)"

# 5. bench bevt: the benchmark's lines (analyze_logs.py's), then the honest figures.
"$BIN" bench bevt "${TINY[@]}" --tokenizer-hidden 16 --tokenizer-blocks 1 --frames 4 --crop 128 --batch-size 4 \
  --max-steps 4 --skip 2 >"$T/bench.out" 2>"$T/bench.err" && ok || bad "bench bevt: $(tail -3 "$T/bench.err")"
/usr/bin/python3 - "$T/bench.out" <<'PY' && ok || bad "bench bevt's lines: $(cat "$T/bench.out")"
import re, sys
out = open(sys.argv[1]).read()
x = float(re.search(r"average iter time: ([0-9.]+) s/iter", out).group(1))
it, sps = map(float, re.search(r"Throughput: ([0-9.]+) it/s \(([0-9.]+) samples/s\)", out).groups())
assert abs(it - 1 / x) < 1e-3 * it and abs(sps - 4 / x) < 0.01 * sps + 0.01, (x, it, sps)
clips, images = map(float, re.search(r"([0-9.]+) clips/s, ([0-9.]+) images/s", out).groups())
assert abs(images - 8 * clips) < 0.01 * images + 0.01, (clips, images)  # 2 clips + 16 images an iteration
assert "TFLOP an iteration as BEVT defines it" in out and "of the" in out
PY
expect_error "--skip must be" bench bevt "${TINY[@]}" --max-steps 4 --skip 4
expect_error "must be even" bench bevt "${TINY[@]}" --batch-size 3

echo "bevt cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
