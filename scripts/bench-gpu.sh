#!/usr/bin/env bash
# The GPU figures of docs/PERFORMANCE.md, on a machine with an NVIDIA GPU and pip's CUDA torch:
#   1. builds combiner against the LibTorch inside pip's torch (scripts/build-cuda.sh);
#   2. training steps on cuda of the 6-layer 512-wide CIFAR-10 ablation model (fp32, bf16) and of
#      the 128-layer main model (bf16, with and without activation checkpointing);
#   3. a short combiner-train run on cuda, on random bytes in CIFAR-10's file format (the GPU
#      machine here reaches no network): it shows the trainer's own loop, logs and checkpoints
#      working on the device; its bits/dim mean nothing;
#   4. attention alone on cuda: forward + backward per variant and L (as bench-performance.sh).
# Usage: scripts/bench-gpu.sh OUT_DIR [extra cmake arguments for scripts/build-cuda.sh]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/bench-gpu.sh OUT_DIR [extra cmake arguments]}
shift
mkdir -p "$out"

# Without NCCL if the build with it fails (its header needs more of CUDA than LibTorch exports).
if ! scripts/build-cuda.sh "$@" >"$out/build.log" 2>&1; then
  grep -m 20 -B2 -A6 'error' "$out/build.log" || tail -40 "$out/build.log"
  echo "== build with NCCL failed; again with -DCOMBINER_NCCL=OFF"
  scripts/build-cuda.sh "$@" -DCOMBINER_NCCL=OFF >"$out/build-no-nccl.log" 2>&1 ||
    { grep -m 30 -B2 -A6 'error' "$out/build-no-nccl.log" || tail -40 "$out/build-no-nccl.log"; exit 1; }
fi
grep -E "c10d NCCL|build-cuda:" "$out/build.log" || true
bench=build-cuda/combiner-bench
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

echo "== training steps"
rows=$(mktemp -d)
preset=configs/cifar10_ablation_combiner_axial_rowmajor.yaml
for precision in float32 bfloat16; do
  "$bench" train --config "$preset" --steps 6 --warmup 2 --matmul-size 8192 \
    --set train.device=cuda --set train.precision=$precision \
    --out "$rows/1-6x512-$precision.csv" || echo "6x512 $precision: failed"
done
"$bench" train --config configs/cifar10_ablation_full.yaml --steps 6 --warmup 2 \
  --matmul-size 8192 --set train.device=cuda --set train.precision=bfloat16 \
  --out "$rows/2-6x512-full.csv" || echo "6x512 full: failed"
for checkpointing in true false; do
  "$bench" train --config configs/cifar_axial.yaml --steps 3 --warmup 1 \
    --matmul-size 8192 --set train.device=cuda --set train.precision=bfloat16 \
    --set train.activation_checkpointing=$checkpointing \
    --out "$rows/3-128layer-ckpt-$checkpointing.csv" ||
    echo "128 layers, checkpointing $checkpointing: failed (see above)"
done

# One table: the header once, then every row.
awk 'FNR > 1 || NR == 1' "$rows"/*.csv >"$out/train-cuda.csv" || true

echo "== combiner-train on cuda"
data=$(mktemp -d)
python3 - "$data" <<'EOF'
import os, sys
import numpy as np
rng = np.random.default_rng(0)
for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
    records = rng.integers(0, 256, size=(10000, 3073), dtype=np.uint8)
    records[:, 0] %= 10
    records.tofile(os.path.join(sys.argv[1], name))
EOF
timeout 150 build-cuda/combiner-train --config configs/cifar10_ablation_combiner_axial_rowmajor.yaml \
  --set data.dir="$data" --set train.device=cuda --set train.precision=bfloat16 \
  --set train.steps=300 --set train.warmup_steps=30 --set train.log_every=50 \
  --set train.eval_every=300 --set train.checkpoint_every=150 --set data.val_size=1000 \
  --set train.sample_every=0 \
  --set train.final_test=false --set train.out_dir="$data/run" 2>&1 | tail -12 ||
  echo "combiner-train: failed or stopped"
cp "$data"/run/metrics.jsonl "$out/train-run-metrics.jsonl" 2>/dev/null || true
rm -rf "$data"

echo "== attention alone"
timeout 150 "$bench" attention --device cuda --lengths 4096,12288,16384 --backward \
  --repeats 5 --timeout 60 --max-mib 0 \
  --out "$out/attention-fwd-bwd-cuda.csv" ||
  echo "attention sweep: stopped (status $?)"
