#!/usr/bin/env bash
# The measurements behind docs/PERFORMANCE.md, in one run on one machine:
#   1. attention alone: forward and forward + backward per variant and L (1024 .. 16384),
#      batch 1, 8 heads, head dim 64, each case in its own child process (time + peak memory);
#   2. the Figure-5-style plot of (1);
#   3. training steps: ms/step, tokens/s, MFU and peak memory of the 6-layer 512-wide CIFAR-10
#      preset (L = 3072), of the quick-start model in fp32 and bf16, and of the 128-layer main
#      model (one step, activation checkpointing on).
# Writes docs/perf/*.csv and docs/perf/*.png. Usage:
#   scripts/bench-performance.sh [--threads T] [--repeats R] [--build DIR] [--lengths LIST]
#                                [--train-only]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=0 train_only=0 repeats=3 build=build lengths=1024,2048,4096,8192,12288,16384
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --lengths) lengths="$2"; shift 2 ;;
    --train-only) train_only=1; shift ;;
    *) echo "bench-performance: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bench="$build/combiner-bench"
[ -x "$bench" ] || { echo "bench-performance: $bench not built (run scripts/build.sh)" >&2; exit 1; }
mkdir -p docs/perf

[ "$train_only" = 1 ] ||
  "$bench" attention --lengths "$lengths" --backward --repeats "$repeats" --threads "$threads" \
    --timeout 900 --out docs/perf/attention-fwd-bwd.csv
[ "$train_only" = 1 ] ||
  scripts/plot-bench.sh docs/perf/attention-fwd-bwd.csv docs/perf/attention-fwd-bwd.png

# Training steps: the 6-layer 512-wide CIFAR-10 model in fp32; the quick-start model in fp32 and
# in bf16 (Debian's LibTorch 1.13 multiplies bf16 matrices about 30x slower than fp32 on this CPU,
# so bf16 is shown on the small model); one step of the 128-layer main model with activation
# checkpointing, whose peak_mib column is the process's peak resident set.
preset=configs/cifar10_ablation_combiner_axial_rowmajor.yaml
"$bench" train --config "$preset" --steps 3 --warmup 1 --threads "$threads" \
  --set train.batch_size=4 --out docs/perf/train-cifar10-6x512-float32.csv
for precision in float32 bfloat16; do
  "$bench" train --config configs/fashion_mnist.yaml --steps 2 --warmup 1 --threads "$threads" \
    --matmul-size 1024 --set train.precision=$precision \
    --out docs/perf/train-fashion-mnist-$precision.csv
done
"$bench" train --config configs/cifar_axial.yaml --steps 1 --warmup 0 \
  --threads "$threads" --set train.activation_checkpointing=true \
  --out docs/perf/train-cifar10-128layer-float32.csv
