#!/usr/bin/env bash
# Quick start: installs, builds, trains the default Fashion-MNIST config on the real data,
# evaluates test bits/dim, writes a grid of samples to runs/quickstart/samples.png (training also
# writes one every 225 steps) and the validation bits per subpixel as a heatmap.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
./scripts/build.sh combiner-train combiner-eval combiner-sample
run=runs/quickstart
if [ -d "$run/checkpoints" ]; then
  echo "quickstart: $run already holds a run; moving it to $run.old-$(date +%s)"
  mv "$run" "$run.old-$(date +%s)"
fi
mkdir -p "$run"
./build/combiner-train --config configs/fashion_mnist.yaml --set train.out_dir=$run | tee "$run/train.log"
checkpoint=$(sed -n 's/^checkpoint: //p' "$run/train.log" | tail -n 1)
./build/combiner-sample --checkpoint "$checkpoint" --num 16 --scale 4 --out "$run/samples.png"
./build/combiner-eval --checkpoint "$checkpoint" --split val --heatmap "$run/bits-heatmap.png"
