#!/usr/bin/env bash
# Video quick start: VideoMAE on CPU, end to end, on a synthetic action dataset.
#   1. install the Debian dependencies and build `build/unmask`;
#   2. `unmask make-videos`: 400 VP9 videos (64x48, 32 frames) of shapes moving left, right, up or
#      down (the label), 300 for training and 100 held out, with VideoMAE and V-SWIFT list files;
#   3. `unmask prepare-video`: each list decoded once into a clip store (short side 32);
#   4. `unmask pretrain-video`: a tiny VideoMAE (dim 64, depth 2, 8x8 patches) from random weights,
#      tube masking 0.9, normalized-pixel MSE, 400 steps of 16 clips;
#   5. `unmask finetune-video` from that checkpoint with VideoMAE's recipe (layer decay 0.75, drop
#      path 0.1, mixup 0.8 / cutmix 1.0, label smoothing 0.1), then the held-out top-1 / top-5 over
#      2 segments x 3 crops per video;
#   6. `unmask eval-video` on the saved checkpoint.
# Measured on the 2-core development machine: about 1 minute in all after the build; the
# pretraining loss falls from 1.00 to 0.87 and the held-out top-1 is 100%.
# Environment: UNMASK_QUICKSTART_DIR (default /tmp/unmask-quickstart-video).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/cmake_configure.sh build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2 --target unmask

DIR=${UNMASK_QUICKSTART_DIR:-/tmp/unmask-quickstart-video}
rm -rf "$DIR" && mkdir -p "$DIR"
echo "== unmask make-videos"
build/unmask make-videos --output "$DIR/videos" --videos-per-class 100 --width 64 --height 48 --frames 32
echo "== unmask prepare-video"
build/unmask prepare-video --list "$DIR/videos/train_videomae.txt" --output "$DIR/train.ucs" --short-side 32
build/unmask prepare-video --list "$DIR/videos/val_videomae.txt" --output "$DIR/val.ucs" --short-side 32
echo "== unmask pretrain-video (tiny VideoMAE, tube mask 0.9)"
build/unmask pretrain-video --data "$DIR/train.ucs" --output "$DIR/pretrain" --preset tiny --patch 8 --batch 16 \
  --steps 400 --lr 1.5e-3 --warmup 0.05 --log-every 50
echo "== unmask finetune-video (from the pretrained encoder)"
build/unmask finetune-video --data "$DIR/train.ucs" --val "$DIR/val.ucs" --init-from "$DIR/pretrain/model" \
  --classes "$DIR/videos/classes.txt" --output "$DIR/finetune" --batch 16 --epochs 30 --lr 2e-3 --warmup 0.05 --log-every 60
echo "== unmask eval-video"
build/unmask eval-video --model "$DIR/finetune/model" --data "$DIR/val.ucs" --test-segments 2 --test-crops 3
