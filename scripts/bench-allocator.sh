#!/usr/bin/env bash
# The malloc behind every tensor (docs/PERFORMANCE.md, "Memory allocator"): ms/step and peak
# resident memory of training steps under
#   glibc     glibc's malloc tuned as src/util/runtime.cpp does (a build with -DCOMBINER_JEMALLOC=OFF)
#   jemalloc  the default build: jemalloc, freed pages kept (runtime.cpp's malloc_conf)
#   jemalloc-purge-10s  the same binary with jemalloc's own default (MALLOC_CONF: freed pages
#             purged after 10 s): the setting runtime.cpp overrides, CIFAR-10 shape only
#   tcmalloc  the glibc build with Debian's libtcmalloc-minimal4 preloaded, when installed
# on three shapes: the quick-start model (Fashion-MNIST, 3 x 64, batch 16), the CIFAR-10
# ablation model (6 x 512, L 3072, batch 4) and the ImageNet-64 one (6 x 512, L 12288, batch 1,
# activation checkpointing). One run, one machine, nothing else running.
#
#   scripts/bench-allocator.sh [--threads T] [--out CSV]   (default docs/perf/allocator.csv)
#
# Builds build-glibc/ (combiner-bench only) beside build/ the first time: ~10 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 out=docs/perf/allocator.csv
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-allocator.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
./scripts/build.sh combiner-bench >/dev/null
cmake -S . -B build-glibc -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOMBINER_BUILD_TESTS=OFF \
  -DCOMBINER_JEMALLOC=OFF >/dev/null
ninja -C build-glibc combiner-bench >/dev/null
tcmalloc=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4

rows=$(mktemp)
trap 'rm -f "$rows" "$rows.one"' EXIT
# case allocator config steps warmup [--set ...]: one combiner-bench train run, one CSV row.
case_row() {
  local allocator=$1 config=$2 steps=$3 warmup=$4 bench=build/combiner-bench
  shift 4
  local env=()
  case "$allocator" in
    glibc) bench=build-glibc/combiner-bench ;;
    tcmalloc) bench=build-glibc/combiner-bench env=(LD_PRELOAD=$tcmalloc) ;;
    jemalloc-purge-10s) env=(MALLOC_CONF=dirty_decay_ms:10000,muzzy_decay_ms:0) ;;
  esac
  env "${env[@]}" "$bench" train --config "$config" --steps "$steps" --warmup "$warmup" \
    --threads "$threads" --matmul-size 256 --out "$rows.one" "$@" |
    { grep -oE '[0-9.]+ ms/step|peak memory [0-9]+ MiB \([^)]*\)' || true; } | tr '\n' ' '
  echo "[$allocator, $config]"
  tail -1 "$rows.one" | sed "s/^/$allocator,/" >>"$rows"
}

allocators=(glibc jemalloc)
[ -f "$tcmalloc" ] && allocators+=(tcmalloc)
for a in "${allocators[@]}"; do
  case_row "$a" configs/fashion_mnist.yaml 10 2
  case_row "$a" configs/cifar10_ablation_combiner_axial_rowmajor.yaml 3 1 --set train.batch_size=4
  case_row "$a" configs/imagenet64_ablation_combiner_axial_rowmajor.yaml 2 1 \
    --set train.batch_size=1 --set train.activation_checkpointing=true
done
case_row jemalloc-purge-10s configs/cifar10_ablation_combiner_axial_rowmajor.yaml 3 1 \
  --set train.batch_size=4

mkdir -p "$(dirname "$out")"
{ echo "allocator,$(head -1 "$rows.one")"; cat "$rows"; } >"$out"
echo "wrote $out"
