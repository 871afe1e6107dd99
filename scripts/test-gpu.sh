#!/usr/bin/env bash
# The one prepared script for a GPU machine (one H100 or H200, pip's CUDA torch, no network):
# profiles first, then checks, then measures, each stage under `timeout` and all of them inside
# one time budget, in this order (COMBINER_GPU_STAGES names the ones to run, in the order it names
# them, so that the stages most wanted get the budget first; the build always):
#   build     unpack the Debian packages carried in .cache/gpu-debs (scripts/gpu-deps.sh); use the
#             binaries carried in .cache/gpu-bin (scripts/gpu-prebuild.sh, built elsewhere against
#             the same pip torch) when they load here and were built from this tree's sources
#             (their SOURCE file is scripts/source-stamp.sh's stamp here, which the log's first
#             section prints), else build combiner-bench, combiner-train and combiner-sample
#             against pip's LibTorch (scripts/build-cuda.sh; if that fails, again with the
#             LibTorch 2 fast paths compiled out, COMBINER_TORCH2_PATHS=OFF);
#   profile   where the time goes: LibTorch's profiler (combiner-bench --profile) over the fused
#             attention variants alone (forward + backward, bf16, B 8 x 8 heads x D 64, L 3072
#             and 12288; then vertical at the 128-layer preset's B 16 x 2 heads x D 128), each
#             case's fused launches also timed one by one beside the bytes each moves and, on a
#             card whose bandwidth the script knows, the multiple of its floor that time is;
#             then one training step of ours (CIFAR-10 6 x 512 rowmajor, batch 32;
#             the 128-layer preset) and of the eager peer on the same shapes (torch.profiler):
#             their largest GPU kernels and launches per step, in test-gpu.log, with --count's
#             launches by the CPU's rule beside them (scripts/count_vs_peer.py's count); then
#             Nsight Compute (ncu, where it runs) over the fused kernels at the two shapes where
#             they lose to flash: occupancy, throughput against the peaks, warp stalls;
#   check     combiner-bench kernel-check --device cuda, every case (the attention kernels, then
#             the fused LayerNorm, sampling's norm-linear kernel and decode step with its span
#             summaries' kernel, the linear layers' bias-gradient kernels and the loss's); then a
#             reduced one (--dims 64 --sizes small) under compute-sanitizer --tool memcheck and
#             --tool racecheck with CUDA_LAUNCH_BLOCKING=1 (one line and on where the tool is
#             missing or refused, as under gVisor);
#   attention attention alone, forward + backward, bf16, B 8 x 8 heads x D 64 at L 3072 and 12288,
#             B 2 at 49152: `full` (at::scaled_dot_product_attention, labelled sdpa-flash) and
#             ours, the mixture last (its peak against flash's) -> OUT/attention-vs-flash.csv
#             (with --count: attention-cuda.csv's launches and allocated_mib, against the
#             profile's kernels and the CPU's count);
#   flex      the same cases in compiled FlexAttention (scripts/peer_flex.py, flex:<variant>,
#             every fused variant), one process per L, each row kept as it is measured; the
#             compile is untimed and its seconds logged, Inductor's cache
#             in .cache/inductor (carry it: a warm cache skips most of the compile) and packed
#             back as OUT/inductor-cache.tar.gz;
#   train     training steps, ours (combiner-axial-rowmajor and full) against the plain-PyTorch
#             peer (scripts/peer_gpu.py, eager) and peer-flex: 6 x 512, 8 heads, MLP 4, bf16,
#             CIFAR-10 (L 3072, batch 32) and ImageNet-64 (L 12288, batch 8) -> OUT/gpu-vs-peer.csv;
#   deep      the 128-layer CIFAR-10 preset (bf16) with activation checkpointing, without, and
#             with the MLP halves alone recomputed (train.recompute_mlp); the last two also
#             captured as a CUDA graph (--cuda-graph), and
#             the eager peer at that shape, then (on CUDA) peer-flex with the preset's Combiner
#             (gpu-vs-peer.csv rows of shape cifar10-128x256);
#   quick     the quick-start config (configs/fashion_mnist.yaml, dropout 0.1) trained with the
#             fused kernels and with train.attention_path=composed: the final validation bits/dim
#             must agree within 0.01; on CUDA also with train.cuda_graph=off, and killed (-9) after
#             its first checkpoint then resumed: each within 0.002 of the captured run ->
#             OUT/fused-vs-libtorch.csv;
#   sample    cached sampling of 16 CIFAR-10 images from a fresh 6 x 512 model with each cached
#             decoder (dynamic; static, captured as a CUDA graph: the same images), then of 64
#             from a fresh 128-layer preset (configs/cifar_axial.yaml; static, captured, bfloat16
#             caches, one batch) -> OUT/sampling-cuda.csv;
#   compiled  the peer under torch.compile, both 6 x 512 shapes (appended to gpu-vs-peer.csv);
#   python    the combiner_attention package from the wheel carried in .cache/gpu-wheel
#             (scripts/python-wheel.sh; skipped if built from other sources): its CUDA tests (python/tests/test_cuda.py), then
#             python -m combiner_attention.bench over the attention stage's shapes -> py:<variant>
#             rows of OUT/attention-vs-flash.csv, then in the same process SDPA and the
#             FlexAttention peer (--peers scripts: py:sdpa-flash, py:flex:<variant>; each row
#             written as it is measured, the flex compiles last).
# Everything lands in OUT, kept to 8 files so that all of them come back: test-gpu.log (all
# output), gpu-vs-peer.csv, attention-vs-flash.csv, train-cuda.csv (our raw combiner-bench train
# rows, with MFU), attention-cuda.csv (combiner-bench attention's own rows), fused-vs-libtorch.csv,
# sampling-cuda.csv and inductor-cache.tar.gz. The quick stage reads Fashion-MNIST from
# /usr/share/datasets/fashion-mnist or, on a machine without it, from a copy carried in
# .cache/fashion-mnist (cp -r /usr/share/datasets/fashion-mnist .cache/).
# Usage: scripts/test-gpu.sh OUT_DIR   (COMBINER_GPU_BUDGET_S: seconds for all stages, default 470;
#        COMBINER_GPU_VARIANTS: our variants in the attention stage;
#        COMBINER_GPU_STAGES: comma-separated stage names to run in that order, default all, in the
#        order above)
set -uo pipefail  # no -e: a failed stage is logged and the next one runs
cd "$(dirname "$0")/.." || exit 1
out=${1:?usage: scripts/test-gpu.sh OUT_DIR}
mkdir -p "$out"
exec > >(tee -a "$out/test-gpu.log") 2>&1
budget=${COMBINER_GPU_BUDGET_S:-470}
fused_variants=combiner-fixed,combiner-axial-rowmajor,combiner-axial-vertical,combiner-axial-horizontal
variants=${COMBINER_GPU_VARIANTS:-full,$fused_variants,axial,combiner-mixture}
begin=$SECONDS
work=$(mktemp -d)
bench=build-cuda/combiner-bench
device=cuda precision=bfloat16 steps=6 warmup=2 matmul=8192
stages=${COMBINER_GPU_STAGES:-all}
all_stages=(profile check attention flex train deep quick sample compiled python)
flex_pass=(--backward --dtype bfloat16)  # peer_flex.py attention: what the flex stage times
# in this order (the user's command's variant first: an L's process that runs out of time keeps
# the rows it finished)
flex_variants=combiner-axial-vertical,combiner-fixed,combiner-axial-rowmajor,combiner-axial-horizontal
quick_shrink=() sample_shrink=() sample_count=16 deep_sample_count=64
shapes=("cifar10 3072 32" "imagenet64 12288 8")  # dataset, L, batch
attention_shapes=("3072 8" "12288 8" "49152 2")  # L, batch: one run each, so a hang loses one
ours_shrink=() ours_128=() peer_shape=(--layers 6 --width 512 --heads 8 --mlp 4)
peer_128=(--layers 128 --width 256 --heads 2 --mlp 2 --dropout 0.25)  # configs/cifar_axial.yaml
deep_batch=16
deep_attention=(--batch 16 --heads 2 --dim 128 --lengths 3072 --block 96 --row-len 96)
scale=1  # multiplies every stage's timeout
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$PWD/.cache/inductor}
if [ "${COMBINER_GPU_REHEARSAL:-0}" = 1 ]; then
  # The script's plumbing on the CPU at toy sizes with build/combiner-bench: no build, no GPU,
  # no compile (the peer's --compile fails on torch 1.13, which tries that path too).
  bench=build/combiner-bench device=cpu precision=float32 steps=1 warmup=0 matmul=256 scale=4
  shapes=("cifar10 3072 1")
  attention_shapes=("128 1" "256 1" "512 1")
  ours_shrink=(--set model.layers=1 --set model.width=16 --set model.heads=2 --set model.mlp_ratio=2)
  ours_128=(--set model.layers=2 "${ours_shrink[@]:2}" --set train.batch_size=1)
  peer_shape=(--layers 1 --width 16 --heads 2 --mlp 2 --device cpu)
  peer_128=(--layers 2 --width 16 --heads 2 --mlp 2 --dropout 0.25 --device cpu)
  deep_batch=1
  deep_attention=(--batch 1 --heads 2 --dim 32 --lengths 288 --block 24 --row-len 24)
  # flex_attention has no backward on the CPU, and compiles there only without the log-sum-exp.
  flex_pass=(--dtype float32 --device cpu --eager)
  quick_shrink=(--set train.steps=4 --set train.warmup_steps=1 --set train.eval_every=4
    --set train.checkpoint_every=0 --set data.val_size=100 --set model.layers=1)
  sample_shrink=(--set model.layers=1 --set model.width=16 --set model.heads=2)
  sample_count=2 deep_sample_count=1
fi
if [ "$stages" != all ]; then
  for s in ${stages//,/ }; do
    [[ " ${all_stages[*]} " == *" $s "* ]] ||
      { echo "COMBINER_GPU_STAGES: '$s' is not one of: ${all_stages[*]}"; exit 2; }
  done
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
# The card's memory bandwidth in GB/s (its data sheet), for the profile's floors: 0 = unknown.
case "$gpu" in
  *H200*) bandwidth=4800 ;;
  *H100*HBM3*) bandwidth=3350 ;;
  *H100*) bandwidth=2000 ;;
  *) bandwidth=0 ;;
esac
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
nvcc --version 2>/dev/null | tail -1
echo "stages: ${stages/all/${all_stages[*]}}; budget $budget s"
sources=$(scripts/source-stamp.sh)
echo "sources: $sources (scripts/source-stamp.sh)"
# carried DIR: whether DIR/SOURCE names this tree's sources; says why not.
carried() {
  local built
  built=$(cat "$1/SOURCE" 2>/dev/null) || built=""
  [ "$built" = "$sources" ] && return 0
  echo "$1 was built from other sources (${built:-no stamp}) than this tree's ($sources)"
  return 1
}

section "build: dependencies and binaries"
build() {  # extra cmake arguments
  run_for 330 scripts/build-cuda.sh -DCOMBINER_NCCL=OFF "$@" >>"$work/build.log" 2>&1
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
  export COMBINER_DEPS_PREFIX=$prefix
  export COMBINER_TARGETS="combiner-bench combiner-train combiner-sample"
  # Binaries built elsewhere against the same pip torch (scripts/gpu-prebuild.sh, carried in
  # .cache/gpu-bin) save the build when they load here; else the build below. Unpacked into the
  # run's own folder, so that .cache/gpu-bin stays as small as it travels.
  if [ -e .cache/gpu-bin/binaries.tar.xz ] && carried .cache/gpu-bin; then
    mkdir -p "$work/bin"
    if python3 -m tarfile -e .cache/gpu-bin/binaries.tar.xz "$work/bin" &&
      chmod +x "$work"/bin/combiner-*; then
      torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
      cudart=$(dirname "$(find "${torch_lib%/torch/lib}/nvidia" -name 'libcudart.so.13*' 2>/dev/null | head -1)")
      export LD_LIBRARY_PATH="$torch_lib:${cudart:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64${prefix:+:$prefix/lib/x86_64-linux-gnu}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      if "$work/bin/combiner-bench" --help >/dev/null 2>"$work/prebuilt.log"; then
        bench=$work/bin/combiner-bench
        echo "build: the binaries carried in .cache/gpu-bin load here; no build"
      else
        echo "build: the carried binaries do not load here:"
        head -3 "$work/prebuilt.log"
      fi
    else
      echo "build: .cache/gpu-bin/binaries.tar.xz does not unpack"
    fi
  fi
  if [ "$bench" = build-cuda/combiner-bench ]; then
    if build; then
      echo "build: ok ($((SECONDS - begin)) s)"
    else
      grep -m 20 -B2 -A8 'error' "$work/build.log" || tail -40 "$work/build.log"
      echo "build: failed; again with the LibTorch 2 fast paths compiled out"
      build -DCOMBINER_TORCH2_PATHS=OFF && echo "build: ok without them: full dense, AdamW foreach"
    fi
    grep -E "build-cuda:|fmt:" "$work/build.log" | head -4
  fi
fi
[ -x "$bench" ] || echo "build: no $bench; only the peer's rows can be measured"
train=${bench%/*}/combiner-train sample=${bench%/*}/combiner-sample  # beside the bench used

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
# peer LENGTH BATCH [peer_gpu.py arguments]: one scripts/peer_gpu.py row into $work/peer.csv.
peer() {
  local length=$1 batch=$2
  shift 2
  echo "-- peer: L $length, batch $batch $*"
  PYTHONUNBUFFERED=1 run_for "${PEER_TIMEOUT:-90}" python3 scripts/peer_gpu.py "${peer_shape[@]}" \
    --length "$length" --batch "$batch" --steps "$steps" --warmup "$warmup" "$@" \
    --csv "$work/peer.csv" || echo "peer: exit status $?"
}
# The peer's rows gathered so far, into gpu-vs-peer.csv.
flush_peer() {
  [ -s "$work/peer.csv" ] && awk 'NR > 1 && !/^gpu,/' "$work/peer.csv" >>"$out/gpu-vs-peer.csv"
  rm -f "$work/peer.csv"
}
deep=$(grep -l "layers: 128" configs/*.yaml | head -1)  # cifar_axial.yaml today

stage_profile() {
  local length batch
  for shape in "${attention_shapes[@]:0:2}"; do
    # shellcheck disable=SC2086  # L, batch
    set -- $shape
    echo "-- attention profile: L $1, batch $2"
    run_for 60 "$bench" attention --device $device --dtype $precision --backward --batch "$2" \
      --heads 8 --dim 64 --lengths "$1" --repeats 3 --profile 15 --timeout 40 --max-mib 0 \
      --bandwidth "$bandwidth" --variants "full,$fused_variants" \
      --out "$work/profile-attention.csv" 2>&1 |
      grep -vE "^\[|^results:"
  done
  echo "-- attention profile: the 128-layer preset's shape (${deep_attention[*]})"
  run_for 40 "$bench" attention --device $device --dtype $precision --backward \
    "${deep_attention[@]}" --repeats 3 --profile 8 --timeout 30 --max-mib 0 \
    --bandwidth "$bandwidth" --variants "full,combiner-axial-vertical" \
    --out "$work/profile-attention-deep.csv" 2>&1 |
    grep -vE "^\[|^results:"
  # shellcheck disable=SC2086  # dataset, L, batch: CIFAR-10's
  set -- ${shapes[0]}
  length=$2 batch=$3
  echo "-- training-step profile: ours, $1 6 x 512 rowmajor, batch $batch"
  run_for 60 "$bench" train --config "configs/$1_ablation_combiner_axial_rowmajor.yaml" \
    --steps 2 --warmup 1 --profile 25 --count --matmul-size 256 --set train.device=$device \
    --set train.precision=$precision --set train.batch_size="$batch" "${ours_shrink[@]}" 2>&1 |
    grep -v "^\["
  echo "-- training-step profile: the eager peer, same shape"
  PEER_TIMEOUT=60 peer "$length" "$batch" --profile 25 --count
  if [ -n "$deep" ]; then
    echo "-- training-step profile: ours, $deep (its own activation checkpointing)"
    run_for 60 "$bench" train --config "$deep" --steps 2 --warmup 1 --profile 25 --count \
      --matmul-size 256 --set train.device=$device --set train.precision=$precision \
      "${ours_128[@]}" 2>&1 | grep -v "^\["
    echo "-- training-step profile: the eager peer at that shape, batch $deep_batch"
    peer_shape_saved=("${peer_shape[@]}")
    peer_shape=("${peer_128[@]}")
    PEER_TIMEOUT=60 peer "$length" "$deep_batch" --profile 25 --count
    peer_shape=("${peer_shape_saved[@]}")
  fi
  rm -f "$work/peer.csv"  # profiled runs are no table rows
  kernel_metrics
}

# kernel_metrics: Nsight Compute over the fused kernels of one forward + backward, at the shapes
# where they lose to flash: combiner-axial-rowmajor at L 3072 (B 8 x 8 heads x D 64) and the
# 128-layer preset's vertical attention (B 16 x 2 heads x D 128): per kernel its duration,
# achieved occupancy and what limits it, memory and compute throughput against the peak, and
# where its warps stall (one line and on where ncu is missing or refused, as under gVisor).
kernel_metrics() {
  local ncu_bin
  ncu_bin=$(command -v ncu)
  for candidate in /usr/local/cuda*/bin/ncu; do
    [ -z "$ncu_bin" ] && [ -x "$candidate" ] && ncu_bin=$candidate
  done
  if [ "$device" != cuda ] || [ -z "$ncu_bin" ]; then
    echo "-- ncu: no CUDA device or no ncu (PATH, /usr/local/cuda*/bin); skipped"
    return
  fi
  local case
  for case in "combiner-axial-rowmajor 8 8 64" "combiner-axial-vertical 16 2 128"; do
    # shellcheck disable=SC2086  # variant, batch, heads, D
    set -- $case
    echo "-- ncu: $1 L 3072, B $2 x $3 heads x D $4, bf16, the fused kernels of one run"
    run_for 60 "$ncu_bin" --target-processes all --kernel-name regex:combiner --launch-count 12 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      "$bench" attention --device cuda --dtype bfloat16 --backward --batch "$2" --heads "$3" \
      --dim "$4" --lengths 3072 --repeats 1 --timeout 60 --max-mib 0 --variants "$1" \
      --out "$work/ncu.csv" >"$work/ncu.log" 2>&1
    echo "ncu: exit status $?"
    # Per kernel: its name line and the metrics that say where the time goes.
    grep -E "combiner::attention|Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|Compute \(SM\) Throughput|DRAM Throughput|Warp Cycles Per Issued|Stall|==ERR|==PROF==|ERROR" \
      "$work/ncu.log" | cut -c1-160 | head -n 220
  done
}

# sanitized TOOL: the reduced kernel-check under compute-sanitizer --tool TOOL; status 2 when
# the tool itself could not run here (kernel-check printed no summary).
sanitized() {
  local tool=$1 log="$work/sanitizer-$1.log" code
  echo "-- compute-sanitizer --tool $tool: kernel-check --dims 64 --sizes small"
  CUDA_LAUNCH_BLOCKING=1 run_for 75 "$sanitizer" --tool "$tool" --error-exitcode 99 \
    --print-limit 20 "$bench" kernel-check --device cuda --dims 64 --sizes small >"$log" 2>&1
  code=$?
  tail -n 30 "$log"
  if [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
    echo "compute-sanitizer $tool: timeout"
  elif [ "$code" -eq 99 ]; then
    echo "compute-sanitizer $tool: ERRORS reported (above)"
  elif ! grep -q "cases pass" "$log"; then
    echo "compute-sanitizer $tool: could not run on this machine (exit $code); sanitizer skipped"
    return 2
  else
    echo "compute-sanitizer $tool: no errors reported; kernel-check exit status $code"
  fi
  return 0
}
stage_check() {
  if ! "$bench" --help 2>&1 | grep -q "kernel-check"; then
    echo "kernel-check: not in this build (combiner-bench has no such subcommand); skipped"
    return
  fi
  run_for 150 "$bench" kernel-check --device "$device"
  echo "kernel-check: exit status $?"
  sanitizer=$(command -v compute-sanitizer)
  for candidate in /usr/local/cuda*/bin/compute-sanitizer; do
    [ -z "$sanitizer" ] && [ -x "$candidate" ] && sanitizer=$candidate
  done
  if [ "$device" != cuda ]; then
    echo "compute-sanitizer: no CUDA device (rehearsal); skipped"
  elif [ -z "$sanitizer" ]; then
    echo "compute-sanitizer: not found (PATH, /usr/local/cuda*/bin); skipped"
  else
    sanitized memcheck && sanitized racecheck
  fi
}

stage_attention() {
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # lengths and batch
    set -- $shape
    run_for 75 "$bench" attention --device $device --dtype $precision --backward --lengths "$1" \
      --batch "$2" --heads 8 --dim 64 --variants "$variants" --repeats 5 --timeout $((30 * scale)) \
      --max-mib 0 --count --out "$work/attention-$1.csv" || echo "attention L $1: exit status $?"
  done
  local files=()
  for f in "$work"/attention-*.csv; do [ -s "$f" ] && files+=("$f"); done
  if [ ${#files[@]} -gt 0 ]; then
    python3 scripts/perf_csv.py attention --gpu "$gpu" --full-as sdpa-flash "${files[@]}" \
      >>"$out/attention-vs-flash.csv"
    awk 'FNR > 1 || NR == 1' "${files[@]}" >"$out/attention-cuda.csv"
  fi
}

stage_flex() {
  # One process per L (torch.compile per shape; a hang loses one). The compile comes first,
  # untimed, its seconds logged; a warm Inductor cache (carried .cache/inductor) shortens it.
  echo "Inductor cache: $TORCHINDUCTOR_CACHE_DIR ($(du -sh "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null | cut -f1 || echo empty))"
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # lengths and batch
    set -- $shape
    echo "-- flex: L $1, batch $2"
    PYTHONUNBUFFERED=1 run_for 200 python3 scripts/peer_flex.py attention --lengths "$1" \
      --batch "$2" --heads 8 --dim 64 --variants "$flex_variants" \
      --repeats 5 "${flex_pass[@]}" --csv "$work/flex-attention.csv" ||
      echo "flex attention L $1: exit status $?"
  done
  [ -s "$work/flex-attention.csv" ] &&
    awk 'NR > 1 && !/^gpu,/' "$work/flex-attention.csv" >>"$out/attention-vs-flash.csv"
}

stage_train() {
  for shape in "${shapes[@]}"; do
    # shellcheck disable=SC2086  # dataset, L, batch
    set -- $shape
    for attention in combiner-axial-rowmajor full; do
      ours "$1-6x512" "configs/$1_ablation_${attention//-/_}.yaml" "$attention" "$3" "$2" \
        "${ours_shrink[@]}"
    done
    peer "$2" "$3"
    if [ "$device" = cuda ]; then  # compiling flex_attention's kernels comes first
      PEER_TIMEOUT=150 peer "$2" "$3" --system peer-flex --attention combiner-axial-rowmajor
    else
      echo "-- peer-flex: needs CUDA (flex_attention has no backward on the CPU); skipped"
    fi
  done
  flush_peer
}

stage_deep() {
  echo "preset: ${deep:-none found in configs/}"
  [ -n "$deep" ] || return
  local log="$work/128.log" code
  # The preset as it is (activation_checkpointing auto: its summary line says which plan it
  # measured and chose, and the peak that measurement predicts beside the real one), whole
  # blocks recomputed, the MLP halves recomputed.
  for checkpointing in auto true mlp; do
    local whole=$checkpointing mlp=false
    [ "$checkpointing" = mlp ] && whole=false mlp=true
    # Without whole blocks recomputed: the step captured as a CUDA graph too (its replays after
    # the steps), as the trainer runs it (auto reports it not captured if it chose whole blocks).
    local graph=()
    [ "$whole" != true ] && [ "$device" = cuda ] && graph=(--cuda-graph)
    echo "-- activation checkpointing $whole, recompute_mlp $mlp ${graph[*]}"
    run_for 120 "$bench" train --config "$deep" --steps 3 --warmup 1 \
      --matmul-size $matmul --set train.device=$device --set train.precision=$precision \
      --set train.activation_checkpointing=$whole --set train.recompute_mlp=$mlp \
      "${ours_128[@]}" "${graph[@]}" \
      --out "$work/128-$checkpointing.csv" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    # The preset as configured (auto) is also a row of gpu-vs-peer.csv, shape cifar10-128x256
    # (perf_csv.py names it from the row's dataset, layers and width).
    if [ "$code" -eq 0 ]; then
      awk 'NR > 1' "$work/128-$checkpointing.csv" >>"$out/train-cuda.csv"
      [ "$checkpointing" = auto ] && python3 scripts/perf_csv.py ours --gpu "$gpu" \
        "$work/128-$checkpointing.csv" >>"$out/gpu-vs-peer.csv"
    else
      echo "128 layers, checkpointing $checkpointing: $(status_of "$code" "$log")"
      [ "$checkpointing" = auto ] && python3 scripts/perf_csv.py ours --gpu "$gpu" \
        --status "$(status_of "$code" "$log")" --shape cifar10-128x256 \
        --attention "$(sed -n 's/.*type: \([a-z-]*\).*/\1/p' "$deep" | head -1)" --L 3072 \
        --batch "$(sed -n 's/^  batch_size: //p' "$deep" | head -1)" --precision "$precision" \
        >>"$out/gpu-vs-peer.csv"
    fi
  done
  peer_shape=("${peer_128[@]}")
  peer 3072 "$deep_batch"
  # The same model with the preset's Combiner in FlexAttention: what a PyTorch user would run.
  if [ "$device" = cuda ]; then
    PEER_TIMEOUT=180 peer 3072 "$deep_batch" --system peer-flex \
      --attention "$(sed -n 's/.*type: \([a-z-]*\).*/\1/p' "$deep" | head -1)"
  fi
  peer_shape=(--layers 6 --width 512 --heads 8 --mlp 4)
  [ "$device" = cuda ] || peer_shape=(--layers 1 --width 16 --heads 2 --mlp 2 --device cpu)
  flush_peer
}

stage_quick() {
  local fashion="" d name verdict
  for d in /usr/share/datasets/fashion-mnist .cache/fashion-mnist; do
    if [ -s "$d/train-images-idx3-ubyte.gz" ] || [ -s "$d/train-images-idx3-ubyte" ]; then
      fashion=$d
      break
    fi
  done
  if [ ! -x "$train" ]; then
    echo "quick-start: no $train; skipped"
    return
  elif [ -z "$fashion" ]; then
    echo "quick-start: no Fashion-MNIST (carry .cache/fashion-mnist, a copy of /usr/share/datasets/fashion-mnist); skipped"
    return
  fi
  declare -A bpd=()
  # quick_run NAME [--set ...]: the config trained into $work/quick-NAME, dropout on (so that the
  # captured step's masks are compared too); its final val bpd into bpd[NAME] and the csv.
  quick_run() {
    local name=$1 run="$work/quick-$1" log="$work/quick-$1.log" started=$SECONDS code value status
    shift
    echo "-- combiner-train configs/fashion_mnist.yaml, $name: $*"
    run_for 150 "$train" --config configs/fashion_mnist.yaml --set data.dir="$fashion" \
      --set train.device=$device --set train.out_dir="$run" --set model.dropout=0.1 \
      --set train.sample_every=0 --set train.final_test=false --set train.tensorboard=false \
      "${quick_shrink[@]}" "$@" >"$log" 2>&1
    code=$?
    grep -E "attention|training step|parameters|val bpd|resumed|error" "$log" | head -8
    value=$(grep -o '"val_bpd": [^,}]*' "$run/metrics.jsonl" 2>/dev/null | tail -1 | sed 's/.*: //')
    status=ok
    [ "$code" -eq 0 ] && [ -n "$value" ] || status=$(status_of "$code" "$log")
    [ "$status" = ok ] && bpd[$name]=$value
    echo "$name,$value,$((SECONDS - started)),$status" >>"$out/fused-vs-libtorch.csv"
  }
  # compare A B LIMIT: |bpd[A] - bpd[B]| against LIMIT, as a csv row and a line.
  compare() {
    [ -n "${bpd[$1]:-}" ] && [ -n "${bpd[$2]:-}" ] || return
    verdict=$(awk -v a="${bpd[$1]}" -v b="${bpd[$2]}" -v m="$3" \
      'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.6f,%s", d, (d <= m ? "pass" : "FAIL") }')
    echo "$1 - $2,${verdict%,*},,${verdict#*,}" >>"$out/fused-vs-libtorch.csv"
    echo "quick-start: val bpd $1 ${bpd[$1]}, $2 ${bpd[$2]}: |difference| ${verdict%,*} (<= $3: ${verdict#*,})"
  }
  quick_run auto --set train.attention_path=auto  # on CUDA the step is captured (cuda_graph auto)
  quick_run composed --set train.attention_path=composed
  compare auto composed 0.01
  [ "$device" = cuda ] || return
  quick_run graph-off --set train.attention_path=auto --set train.cuda_graph=off
  compare auto graph-off 0.002
  # The captured run killed (-9) once its first checkpoint is on disk, then resumed.
  name=killed
  (
    "$train" --config configs/fashion_mnist.yaml --set data.dir="$fashion" \
      --set train.device=$device --set train.out_dir="$work/quick-$name" --set model.dropout=0.1 \
      --set train.sample_every=0 --set train.final_test=false --set train.tensorboard=false \
      >"$work/quick-$name-first.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
      ls "$work/quick-$name"/checkpoints/step-*.ckpt >/dev/null 2>&1 && break
      sleep 0.1
    done
    kill -9 $pid 2>/dev/null && echo "-- killed (-9) after $(ls "$work/quick-$name"/checkpoints/)"
    wait $pid 2>/dev/null
  )
  quick_run $name --set train.attention_path=auto --resume
  compare auto $name 0.002
}

stage_sample() {
  local log="$work/sample.log" run config count decoder cache_args used code rate L seconds status
  local replay
  if [ ! -x "$sample" ]; then
    echo "sampling: no $sample; skipped"
    return
  fi
  # A fresh 6 x 512 model with each cached decoder (the images must be the same), then the
  # target's: 64 images of the 128-layer preset with the default one (static, captured) over
  # bfloat16 caches, in one batch on every card (their q, k, v caches: 38.7 GB; 77 GB in
  # float32, which an 80 GB card would draw in two batches).
  for run in "configs/cifar10_ablation_combiner_axial_rowmajor.yaml $sample_count dynamic" \
    "configs/cifar10_ablation_combiner_axial_rowmajor.yaml $sample_count static" \
    "$deep $deep_sample_count auto"; do
    # shellcheck disable=SC2086  # config, images, decoder
    set -- $run
    config=$1 count=$2 decoder=$3
    [ -n "$decoder" ] || continue  # no 128-layer preset in configs/
    echo "-- sampling: $count images, $config, --decoder $decoder"
    cache_args=()
    [ "$decoder" = auto ] && cache_args=(--cache-dtype bfloat16)
    run_for 150 "$sample" --config "$config" --num "$count" --seed 0 --decoder "$decoder" \
      "${cache_args[@]}" \
      --set train.device=$device "${sample_shrink[@]}" --out "$work/samples.png" \
      --npy "$work/samples-$decoder.npy" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    rate=$(sed -n 's/.*: \([0-9.]*\) images\/s$/\1/p' "$log")
    L=$(sed -n 's/.* of L = \([0-9]*\) .*/\1/p' "$log")
    seconds=$(sed -n 's/.* in \([0-9.]*\)s (.*/\1/p' "$log")
    used=$(sed -n 's/.*decoder: \(.*\)$/\1/p' "$log" | head -1)
    # the captured decoder's GPU time a step (its graph replays) against the whole step's
    replay=$(sed -n 's/.*graph replays: \([0-9.]*\) ms of GPU time a step, of \([0-9.]*\) ms.*/\1,\2/p' "$log" | tail -1)
    status=ok
    [ "$code" -eq 0 ] && [ -n "$rate" ] || status=$(status_of "$code" "$log")
    echo "$gpu,$(basename "$config" .yaml),$L,$count,${used//,/;},$seconds,$rate,$status,${replay:-,}" \
      >>"$out/sampling-cuda.csv"
    if [ "$decoder" = static ] && [ -s "$work/samples-dynamic.npy" ]; then
      if cmp -s "$work/samples-dynamic.npy" "$work/samples-static.npy"; then
        echo "sampling: the static and dynamic decoders drew the same images"
      else
        echo "sampling: the static and dynamic decoders drew different images"
      fi
    fi
  done
}

stage_compiled() {
  for shape in "${shapes[@]}"; do
    # shellcheck disable=SC2086  # dataset, L, batch
    set -- $shape
    PEER_TIMEOUT=170 peer "$2" "$3" --compile
  done
  flush_peer
}

stage_python() {
  local wheel
  wheel=$(find .cache/gpu-wheel -name "*.whl" 2>/dev/null | head -1)
  if [ -z "$wheel" ]; then
    echo "no .cache/gpu-wheel/*.whl (scripts/python-wheel.sh, passed in carry); skipped"
    return
  fi
  carried .cache/gpu-wheel || { echo "skipped (scripts/python-wheel.sh makes it again)"; return; }
  python3 -m pip install -q --no-deps --no-index --target "$work/py" "$wheel" || return
  PYTHONPATH="$work/py" run_for 150 python3 python/tests/run.py -k test_cuda ||
    echo "python tests: exit status $?"
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # L, batch
    set -- $shape
    PYTHONPATH="$work/py" run_for 150 python3 -m combiner_attention.bench --device $device \
      --dtype $precision --backward --lengths "$1" --batch "$2" --heads 8 --dim 64 \
      --variants "$variants" --repeats 5 --peers scripts --no-header \
      >>"$out/attention-vs-flash.csv" ||
      echo "python bench L $1: exit status $?"
  done
}

# The tables' headers first, so that every file exists whichever stages run.
python3 scripts/perf_csv.py header peer >"$out/gpu-vs-peer.csv"
python3 scripts/perf_csv.py header attention >"$out/attention-vs-flash.csv"
echo "dataset,attention,L,batch,layers,width,heads,parameters,device,precision,threads,steps,ms_per_step,tokens_per_s,gflop_per_step,dense_gflop,attention_gflop,matmul_gflops,mfu,peak_mib" >"$out/train-cuda.csv"
echo "run,val_bpd,seconds,status" >"$out/fused-vs-libtorch.csv"
echo "gpu,config,L,images,decoder,seconds,images_per_s,status,replay_ms_per_step,ms_per_step" \
  >"$out/sampling-cuda.csv"
order=("${all_stages[@]}")
[ "$stages" = all ] || read -ra order <<<"${stages//,/ }"
for stage in "${order[@]}"; do
  section "$stage"
  if [ ! -x "$bench" ] && [[ " profile check attention deep " == *" $stage "* ]]; then
    echo "no $bench; skipped"
    continue
  fi
  "stage_$stage"
done

section "done in $((SECONDS - begin)) s"
for f in gpu-vs-peer attention-vs-flash fused-vs-libtorch sampling-cuda; do
  echo "-- $f.csv"
  column -s, -t <"$out/$f.csv" 2>/dev/null || cat "$out/$f.csv"
done
# Inductor's cache (FlexAttention's compiled kernels) back to this machine's caller, when small.
if [ -d "$TORCHINDUCTOR_CACHE_DIR" ]; then
  tar -C "$(dirname "$TORCHINDUCTOR_CACHE_DIR")" -czf "$out/inductor-cache.tar.gz" \
    "$(basename "$TORCHINDUCTOR_CACHE_DIR")"
  size=$(du -m "$out/inductor-cache.tar.gz" | cut -f1)
  if [ "$size" -gt 15 ]; then
    echo "inductor cache: ${size} MiB, over what comes back; not kept"
    rm -f "$out/inductor-cache.tar.gz"
  else
    echo "inductor cache: ${size} MiB in OUT/inductor-cache.tar.gz (tar -C .cache -xzf it, carry .cache/inductor)"
  fi
fi
rm -rf "$work"
sleep 1  # lets tee write the log's last lines before OUT is collected
