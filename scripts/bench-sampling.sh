#!/usr/bin/env bash
# Sampling speed, cached vs uncached, on untrained models (speed does not depend on the weights):
# the Fashion-MNIST quick-start model (L = 784) and the 6-layer 512-wide CIFAR-10 ablation preset
# (L = 3072). Prints a Markdown table for docs/SAMPLING.md; each ratio comes from this one run.
#   scripts/bench-sampling.sh [--threads T] [--build DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=1 build=build
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    *) echo "bench-sampling: unknown argument '$1' (expected --threads T or --build DIR)" >&2; exit 2 ;;
  esac
done
sample="$build/combiner-sample"
[ -x "$sample" ] || { echo "bench-sampling: $sample not built (run scripts/build.sh)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# images/s from the sampler's summary line.
rate() {
  "$sample" --config "$1" --num "$2" --seed 0 --threads "$threads" --out "$out/grid.png" "${@:3}" 2>&1 |
    sed -n 's/.*: \([0-9.]*\) images\/s$/\1/p'
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
  ratio=$(awk -v a="$cached" -v b="$uncached" 'BEGIN { printf "%.0fx", a / b }')
  echo "| $(basename "$config" .yaml) | $L | $num | $uncached | $cached | $ratio |"
done
echo
echo "threads: $threads; $(nproc) cores; $(date -u +%Y-%m-%d)"
