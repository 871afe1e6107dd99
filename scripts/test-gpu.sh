#!/usr/bin/env bash
# The one prepared script for a GPU lease (one H100 or H200, pip's CUDA torch, no network), in
# order of importance, each stage under `timeout` and all of them inside one time budget:
#   1. unpack the Debian packages carried in .cache/gpu-debs (scripts/gpu-deps.sh) and build
#      combiner-bench against pip's LibTorch (scripts/build-cuda.sh); if that build fails, again
#      with the LibTorch 2 fast paths compiled out (COMBINER_TORCH2_PATHS=OFF);
#   2. combiner-bench kernel-check --device cuda (where the build has that subcommand);
#   3. training steps, ours against the plain-PyTorch peer (scripts/peer_gpu.py, eager): 6 x 512,
#      8 heads, MLP 4, bf16, CIFAR-10 (L 3072, batch 32) and ImageNet-64 (L 12288, batch 8), ours
#      with combiner-axial-rowmajor and full -> OUT/gpu-vs-peer.csv;
#   4. attention alone, forward + backward, bf16, B 8 x 8 heads x D 64 at L 3072 and 12288, B 2 at
#      49152: `full` (= at::scaled_dot_product_attention, labelled sdpa-flash) and ours
#      -> OUT/attention-vs-flash.csv;
#   5. the 128-layer CIFAR-10 preset, bf16, with and without activation checkpointing;
#   6. the peer under torch.compile, both shapes (appended to gpu-vs-peer.csv).
# Everything lands in OUT (at most 8 files come back from a lease): test-gpu.log (all output),
# build.log, gpu-vs-peer.csv, attention-vs-flash.csv, train-cuda.csv (our raw combiner-bench train
# rows, with MFU) and attention-cuda.csv (combiner-bench attention's own rows).
# Usage: scripts/test-gpu.sh OUT_DIR   (COMBINER_GPU_BUDGET_S: seconds for all stages, default 470;
#        COMBINER_GPU_VARIANTS: our variants in stage 4, default full + three of ours)
set -uo pipefail  # no -e: a failed stage is logged and the next one runs
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: scripts/test-gpu.sh OUT_DIR}
mkdir -p "$out"
exec > >(tee -a "$out/test-gpu.log") 2>&1
budget=${COMBINER_GPU_BUDGET_S:-470}
variants=${COMBINER_GPU_VARIANTS:-full,combiner-axial-rowmajor,combiner-fixed,axial}
begin=$SECONDS
work=$(mktemp -d)
bench=build-cuda/combiner-bench
device=cuda precision=bfloat16 steps=6 warmup=2 matmul=8192
shapes=("cifar10 3072 32" "imagenet64 12288 8")  # dataset, L, batch
attention_shapes=("3072 8" "12288 8" "49152 2")  # L, batch: one run each, so a hang loses one
ours_shrink=() ours_128=() peer_shape=(--layers 6 --width 512 --heads 8 --mlp 4)
scale=1  # multiplies every stage's timeout
if [ "${COMBINER_GPU_REHEARSAL:-0}" = 1 ]; then
  # The script's plumbing on the CPU at toy sizes with build/combiner-bench: no build, no GPU,
  # no compile (the peer's --compile fails on torch 1.13, which tries that path too).
  bench=build/combiner-bench device=cpu precision=float32 steps=1 warmup=0 matmul=256 scale=4
  shapes=("cifar10 3072 1")
  attention_shapes=("128 1" "256 1" "512 1")
  ours_shrink=(--set model.layers=1 --set model.width=16 --set model.heads=2 --set model.mlp_ratio=2)
  ours_128=(--set model.layers=2 "${ours_shrink[@]:2}" --set train.batch_size=1)
  peer_shape=(--layers 1 --width 16 --heads 2 --mlp 2 --device cpu)
fi

left() { echo $((budget - (SECONDS - begin))); }
# run_for MAX_S COMMAND...: COMMAND under timeout min(MAX_S, what is left of the budget).
run_for() {
  local max=$(($1 * scale)) remaining
  shift
  remaining=$(left)
  [ "$remaining" -lt "$max" ] && max=$remaining
  if [ "$max" -lt 5 ]; then
    echo "-- skipped (budget spent): $*"
    return 124
  fi
  timeout --kill-after=5 "$max" "$@"
}
section() { echo; echo "== [$((SECONDS - begin)) s] $*"; }
# What a failed run's output says: oom, timeout or failed.
status_of() {
  local code=$1 log=$2
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then echo timeout
  elif grep -qiE "out of memory|CUDA_ERROR_OUT_OF_MEMORY|bad_alloc" "$log"; then echo oom
  else echo failed; fi
}

section "machine"
gpu=cpu
if [ "$device" = cuda ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
nvcc --version 2>/dev/null | tail -1

section "1. dependencies and build"
build() {  # extra cmake arguments
  run_for 330 scripts/build-cuda.sh -DCOMBINER_NCCL=OFF "$@" >>"$out/build.log" 2>&1
}
if [ "$device" = cpu ]; then
  echo "rehearsal: using $bench as it is"
else
  prefix=""
  if [ -d .cache/gpu-debs ]; then
    prefix=$(scripts/gpu-deps.sh --unpack /tmp/combiner-deps) && echo "deps prefix: $prefix"
  else
    echo "no .cache/gpu-debs (scripts/gpu-deps.sh, passed in carry): the system's packages"
  fi
  export COMBINER_DEPS_PREFIX=$prefix COMBINER_TARGETS=combiner-bench
  if build; then
    echo "build: ok ($((SECONDS - begin)) s)"
  else
    grep -m 20 -B2 -A8 'error' "$out/build.log" || tail -40 "$out/build.log"
    echo "build: failed; again with the LibTorch 2 fast paths compiled out"
    build -DCOMBINER_TORCH2_PATHS=OFF && echo "build: ok without them: full dense, AdamW foreach"
  fi
  grep -E "build-cuda:|fmt:" "$out/build.log" | head -4
fi
[ -x "$bench" ] || echo "build: no $bench; only the peer's rows can be measured"

section "2. kernel-check"
if [ -x "$bench" ] && "$bench" --help 2>&1 | grep -q "kernel-check"; then
  run_for 90 "$bench" kernel-check --device "$device"
  echo "kernel-check: exit status $?"
else
  echo "kernel-check: not in this build (combiner-bench has no such subcommand); skipped"
fi

# ours SHAPE CONFIG ATTENTION BATCH L [--set ...]: one `combiner-bench train` row.
ours() {
  local shape=$1 config=$2 attention=$3 batch=$4 length=$5 code
  shift 5
  local csv="$work/ours-$shape-$attention.csv" log="$work/ours.log"
  echo "-- ours: $config, batch $batch $*"
  run_for 120 "$bench" train --config "$config" --steps "$steps" --warmup "$warmup" \
    --matmul-size $matmul --set train.device=$device --set train.precision=$precision \
    --set train.batch_size="$batch" --set train.grad_accum=1 "$@" --out "$csv" 2>&1 | tee "$log"
  code=${PIPESTATUS[0]}
  if [ "$code" -eq 0 ] && [ -s "$csv" ]; then
    python3 scripts/perf_csv.py ours --gpu "$gpu" "$csv" >>"$out/gpu-vs-peer.csv"
    awk 'NR > 1' "$csv" >>"$out/train-cuda.csv"
  else
    python3 scripts/perf_csv.py ours --gpu "$gpu" --status "$(status_of "$code" "$log")" \
      --shape "$shape" --attention "$attention" --L "$length" --batch "$batch" \
      --precision "$precision" >>"$out/gpu-vs-peer.csv"
  fi
}
# peer LENGTH BATCH [--compile]: one scripts/peer_gpu.py row.
peer() {
  local length=$1 batch=$2
  shift 2
  echo "-- peer: L $length, batch $batch $*"
  PYTHONUNBUFFERED=1 run_for "${PEER_TIMEOUT:-90}" python3 scripts/peer_gpu.py "${peer_shape[@]}" \
    --length "$length" --batch "$batch" --steps "$steps" --warmup "$warmup" "$@" \
    --csv "$work/peer.csv" || echo "peer: exit status $?"
}

section "3. training steps: ours against the peer (eager)"
python3 scripts/perf_csv.py header peer >"$out/gpu-vs-peer.csv"
echo "dataset,attention,L,batch,layers,width,heads,parameters,device,precision,threads,steps,ms_per_step,tokens_per_s,gflop_per_step,dense_gflop,attention_gflop,matmul_gflops,mfu,peak_mib" >"$out/train-cuda.csv"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086  # dataset, L, batch
  set -- $shape
  if [ -x "$bench" ]; then
    for attention in combiner-axial-rowmajor full; do
      ours "$1-6x512" "configs/$1_ablation_${attention//-/_}.yaml" "$attention" "$3" "$2" \
        "${ours_shrink[@]}"
    done
  fi
  peer "$2" "$3"
done
[ -s "$work/peer.csv" ] && awk 'NR > 1 && !/^gpu,/' "$work/peer.csv" >>"$out/gpu-vs-peer.csv"

section "4. attention alone against sdpa-flash (forward + backward, bf16)"
if [ -x "$bench" ]; then
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # lengths and batch
    set -- $shape
    run_for 75 "$bench" attention --device $device --dtype $precision --backward --lengths "$1" \
      --batch "$2" --heads 8 --dim 64 --variants "$variants" --repeats 5 --timeout $((30 * scale)) \
      --max-mib 0 --out "$work/attention-$1.csv" || echo "attention L $1: exit status $?"
  done
  files=()
  for f in "$work"/attention-*.csv; do [ -s "$f" ] && files+=("$f"); done
  python3 scripts/perf_csv.py header attention >"$out/attention-vs-flash.csv"
  if [ ${#files[@]} -gt 0 ]; then
    python3 scripts/perf_csv.py attention --gpu "$gpu" --full-as sdpa-flash "${files[@]}" \
      >>"$out/attention-vs-flash.csv"
    awk 'FNR > 1 || NR == 1' "${files[@]}" >"$out/attention-cuda.csv"
  fi
fi

section "5. the 128-layer CIFAR-10 preset (bf16)"
deep=$(grep -l "layers: 128" configs/*.yaml | head -1)  # cifar10_main_128layer.yaml today
echo "preset: ${deep:-none found in configs/}"
if [ -x "$bench" ] && [ -n "$deep" ]; then
  for checkpointing in true false; do
    echo "-- activation checkpointing $checkpointing"
    log="$work/128.log"
    run_for 90 "$bench" train --config "$deep" --steps 3 --warmup 1 \
      --matmul-size $matmul --set train.device=$device --set train.precision=$precision \
      --set train.activation_checkpointing=$checkpointing "${ours_128[@]}" \
      --out "$work/128-$checkpointing.csv" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    if [ "$code" -eq 0 ]; then
      awk 'NR > 1' "$work/128-$checkpointing.csv" >>"$out/train-cuda.csv"
    else
      echo "128 layers, checkpointing $checkpointing: $(status_of "$code" "$log")"
    fi
  done
fi

section "6. the peer under torch.compile"
rm -f "$work/peer.csv"
for shape in "${shapes[@]}"; do
  # shellcheck disable=SC2086  # dataset, L, batch
  set -- $shape
  PEER_TIMEOUT=170 peer "$2" "$3" --compile
done
[ -s "$work/peer.csv" ] && awk 'NR > 1 && !/^gpu,/' "$work/peer.csv" >>"$out/gpu-vs-peer.csv"

section "done in $((SECONDS - begin)) s"
for f in gpu-vs-peer attention-vs-flash; do
  echo "-- $f.csv"
  column -s, -t <"$out/$f.csv" 2>/dev/null || cat "$out/$f.csv"
done
rm -rf "$work"
sleep 1  # lets tee write the log's last lines before the lease collects OUT
