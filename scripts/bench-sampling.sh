#!/usr/bin/env bash
# Sampling speed, cached vs uncached, on untrained models (speed does not depend on the weights):
# the Fashion-MNIST quick-start model (L = 784) and the 6-layer 512-wide CIFAR-10 ablation preset
# (L = 3072). Prints a Markdown table for docs/SAMPLING.md; each ratio comes from this one run.
# An uncached run longer than --max-uncached seconds (default 1800) is stopped: its row then gives
# an upper bound on its images/s and a lower bound on the ratio.
#   scripts/bench-sampling.sh [--threads T] [--build DIR] [--max-uncached S]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 build=build max_uncached=1800
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --max-uncached) max_uncached="$2"; shift 2 ;;
    *) echo "bench-sampling: unknown argument '$1' (expected --threads T or --build DIR)" >&2; exit 2 ;;
  esac
done
sample="$build/combiner-sample"
[ -x "$sample" ] || { echo "bench-sampling: $sample not built (run scripts/build.sh)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# images/s from the sampler's summary line; empty if it was stopped by the time limit.
rate() {
  timeout "$max_uncached" "$sample" --config "$1" --num "$2" --seed 0 --threads "$threads" \
    --out "$out/grid.png" "${@:3}" 2>&1 | sed -n 's/.*: \([0-9.]*\) images\/s$/\1/p' || true
}

echo "| model | L | images | uncached images/s | cached images/s | cached / uncached |"
echo "|---|---|---|---|---|---|"
for row in "configs/fashion_mnist.yaml 16" "configs/cifar10_ablation_combiner_axial_rowmajor.yaml 1"; do
  set -- $row
  config=$1 num=$2
  L=$("$sample" --config "$config" --num 1 --threads "$threads" --out "$out/probe.png" --set model.layers=1 2>&1 |
      sed -n 's/.* of L = \([0-9]*\) .*/\1/p')
  uncached=$(rate "$config" "$num" --no-cache)
  cached=$(rate "$config" "$num")
  if [ -n "$uncached" ]; then
    ratio=$(awk -v a="$cached" -v b="$uncached" 'BEGIN { printf "%.0fx", a / b }')
  else  # stopped after max_uncached seconds without finishing
    uncached=$(awk -v n="$num" -v t="$max_uncached" 'BEGIN { printf "< %.5f (stopped after %d s)", n / t, t }')
    ratio=$(awk -v a="$cached" -v n="$num" -v t="$max_uncached" 'BEGIN { printf "> %.0fx", a * t / n }')
  fi
  echo "| $(basename "$config" .yaml) | $L | $num | $uncached | $cached | $ratio |"
done
echo
echo "threads: $threads; $(nproc) cores; $(date -u +%Y-%m-%d)"
