#!/usr/bin/env bash
# The measurements behind docs/PERFORMANCE.md, in one run on one machine:
#   1. attention alone: forward and forward + backward per variant and L (1024 .. 16384),
#      batch 1, 8 heads, head dim 64, each case in its own child process (time + peak memory);
#   2. the Figure-5-style plot of (1);
#   3. training steps of the 6-layer 512-wide CIFAR-10 preset (L = 3072): ms/step, tokens/s, MFU,
#      in fp32 and in bf16 autocast.
# Writes docs/perf/*.csv and docs/perf/*.png. Usage:
#   scripts/bench-performance.sh [--threads T] [--repeats R] [--build DIR] [--lengths LIST]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=0 repeats=3 build=build lengths=1024,2048,4096,8192,12288,16384
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --lengths) lengths="$2"; shift 2 ;;
    *) echo "bench-performance: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
bench="$build/combiner-bench"
[ -x "$bench" ] || { echo "bench-performance: $bench not built (run scripts/build.sh)" >&2; exit 1; }
mkdir -p docs/perf

"$bench" attention --lengths "$lengths" --backward --repeats "$repeats" --threads "$threads" \
  --timeout 900 --out docs/perf/attention-fwd-bwd.csv
scripts/plot-bench.sh docs/perf/attention-fwd-bwd.csv docs/perf/attention-fwd-bwd.png

preset=configs/cifar10_ablation_combiner_axial_rowmajor.yaml
for precision in float32 bfloat16; do
  "$bench" train --config "$preset" --steps 3 --warmup 1 --threads "$threads" \
    --set train.batch_size=4 --set train.precision=$precision \
    --out docs/perf/train-cifar10-6x512-$precision.csv
done
