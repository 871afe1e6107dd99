#!/usr/bin/env bash
# The one prepared script for a GPU machine (one H100 or H200, pip's CUDA torch, no network), in
# order of importance, each stage under `timeout` and all of them inside one time budget:
#   1. unpack the Debian packages carried in .cache/gpu-debs (scripts/gpu-deps.sh); use the
#      binaries carried in .cache/gpu-bin (scripts/gpu-prebuild.sh, built elsewhere against the
#      same pip torch) when they load here, else build combiner-bench, combiner-train and
#      combiner-sample against pip's LibTorch (scripts/build-cuda.sh); if that build fails, again
#      with the LibTorch 2 fast paths compiled out (COMBINER_TORCH2_PATHS=OFF);
#   2. a reduced kernel-check (--dims 64 --sizes small: 8 cases up to L 300) under compute-sanitizer, --tool
#      memcheck then --tool racecheck, with CUDA_LAUNCH_BLOCKING=1 (one line and on where the
#      tool is missing or refused, as under gVisor); then kernel-check --device cuda, every case;
#   3. training steps, ours against the plain-PyTorch peer (scripts/peer_gpu.py, eager) and the
#      peer with our Combiner in FlexAttention (peer-flex, scripts/peer_flex.py): 6 x 512,
#      8 heads, MLP 4, bf16, CIFAR-10 (L 3072, batch 32) and ImageNet-64 (L 12288, batch 8); ours
#      with combiner-axial-rowmajor and full, peer-flex with combiner-axial-rowmajor
#      -> OUT/gpu-vs-peer.csv;
#   4. attention alone, forward + backward, bf16, B 8 x 8 heads x D 64 at L 3072 and 12288, B 2 at
#      49152: `full` (= at::scaled_dot_product_attention, labelled sdpa-flash), ours, and
#      combiner-fixed / combiner-axial-rowmajor in compiled FlexAttention (flex:<variant>)
#      -> OUT/attention-vs-flash.csv;
#   5. the quick-start config (configs/fashion_mnist.yaml) trained on the GPU twice, with the
#      fused kernels and with train.attention_path=composed (the LibTorch path); the final
#      validation bits/dim must agree within 0.01 -> OUT/fused-vs-libtorch.csv;
#   6. cached sampling of 16 CIFAR-10 images from a fresh 6 x 512 model (combiner-sample,
#      images/s) -> OUT/sampling-cuda.csv;
#   7. the 128-layer CIFAR-10 preset, bf16, with and without activation checkpointing (the
#      preset's own setting, with, is also a gpu-vs-peer.csv row of shape cifar10-128x256);
#   8. the peer under torch.compile, both shapes (appended to gpu-vs-peer.csv);
#   9. where the time goes: LibTorch's profiler (combiner-bench --profile) over the fused
#      attention variants alone (forward + backward, bf16, B 8, L 12288) and over training steps
#      of the ImageNet-64 6 x 512 rowmajor model and the 128-layer preset: their largest GPU
#      kernels per step, in test-gpu.log.
# Everything lands in OUT (kept to 8 files, so that all of them can be copied back): test-gpu.log (all output),
# build.log, gpu-vs-peer.csv, attention-vs-flash.csv, train-cuda.csv (our raw combiner-bench train
# rows, with MFU), attention-cuda.csv (combiner-bench attention's own rows),
# fused-vs-libtorch.csv and sampling-cuda.csv.
# Stage 5 reads Fashion-MNIST from /usr/share/datasets/fashion-mnist or, on a machine without it,
# from a copy carried in .cache/fashion-mnist (cp -r /usr/share/datasets/fashion-mnist .cache/).
# Usage: scripts/test-gpu.sh OUT_DIR   (COMBINER_GPU_BUDGET_S: seconds for all stages, default 470;
#        COMBINER_GPU_VARIANTS: our variants in stage 4, default full + three of ours;
#        COMBINER_GPU_STAGES: comma-separated stage numbers 2..9 to run, default all)
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
stages=${COMBINER_GPU_STAGES:-all}
flex_pass=(--backward --dtype bfloat16)  # peer_flex.py attention: what stage 4 times
quick_shrink=() sample_shrink=() sample_count=16
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
  # flex_attention has no backward on the CPU, and compiles there only without the log-sum-exp.
  flex_pass=(--dtype float32 --device cpu --eager)
  quick_shrink=(--set train.steps=4 --set train.warmup_steps=1 --set train.eval_every=4
    --set train.checkpoint_every=0 --set data.val_size=100 --set model.layers=1)
  sample_shrink=(--set model.layers=1 --set model.width=16 --set model.heads=2)
  sample_count=2
fi

left() { echo $((budget - (SECONDS - begin))); }
# wanted N: whether COMBINER_GPU_STAGES asks for stage N.
wanted() { [ "$stages" = all ] || [[ ",$stages," == *",$1,"* ]]; }
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
  export COMBINER_DEPS_PREFIX=$prefix
  export COMBINER_TARGETS="combiner-bench combiner-train combiner-sample"
  # Binaries built elsewhere against the same pip torch (scripts/gpu-prebuild.sh, carried in
  # .cache/gpu-bin) save the build when they load here; else the build below.
  if [ -x .cache/gpu-bin/combiner-bench ]; then
    torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
    cudart=$(dirname "$(find "${torch_lib%/torch/lib}/nvidia" -name 'libcudart.so.13*' 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH="$torch_lib:${cudart:-/usr/local/cuda/lib64}:/usr/local/cuda/lib64${prefix:+:$prefix/lib/x86_64-linux-gnu}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    if .cache/gpu-bin/combiner-bench --help >/dev/null 2>"$work/prebuilt.log"; then
      bench=.cache/gpu-bin/combiner-bench
      echo "build: the carried binaries in .cache/gpu-bin load here; no build"
    else
      echo "build: the carried binaries do not load here:"
      head -3 "$work/prebuilt.log"
    fi
  fi
  if [ "$bench" = build-cuda/combiner-bench ]; then
    if build; then
      echo "build: ok ($((SECONDS - begin)) s)"
    else
      grep -m 20 -B2 -A8 'error' "$out/build.log" || tail -40 "$out/build.log"
      echo "build: failed; again with the LibTorch 2 fast paths compiled out"
      build -DCOMBINER_TORCH2_PATHS=OFF && echo "build: ok without them: full dense, AdamW foreach"
    fi
    grep -E "build-cuda:|fmt:" "$out/build.log" | head -4
  fi
fi
[ -x "$bench" ] || echo "build: no $bench; only the peer's rows can be measured"
train=${bench%/*}/combiner-train sample=${bench%/*}/combiner-sample  # beside the bench used

section "2. kernel-check: reduced under compute-sanitizer, then every case"
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
if ! wanted 2; then
  echo "not asked for (COMBINER_GPU_STAGES=$stages)"
elif [ -x "$bench" ] && "$bench" --help 2>&1 | grep -q "kernel-check"; then
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
  run_for 150 "$bench" kernel-check --device "$device"
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

section "3. training steps: ours against the peer (eager) and peer-flex"
python3 scripts/perf_csv.py header peer >"$out/gpu-vs-peer.csv"
echo "dataset,attention,L,batch,layers,width,heads,parameters,device,precision,threads,steps,ms_per_step,tokens_per_s,gflop_per_step,dense_gflop,attention_gflop,matmul_gflops,mfu,peak_mib" >"$out/train-cuda.csv"
for shape in "${shapes[@]}"; do
  wanted 3 || break
  # shellcheck disable=SC2086  # dataset, L, batch
  set -- $shape
  if [ -x "$bench" ]; then
    for attention in combiner-axial-rowmajor full; do
      ours "$1-6x512" "configs/$1_ablation_${attention//-/_}.yaml" "$attention" "$3" "$2" \
        "${ours_shrink[@]}"
    done
  fi
  peer "$2" "$3"
  if [ "$device" = cuda ]; then  # compiling flex_attention's kernels comes first
    PEER_TIMEOUT=150 peer "$2" "$3" --system peer-flex --attention combiner-axial-rowmajor
  else
    echo "-- peer-flex: needs CUDA (flex_attention has no backward on the CPU); skipped"
  fi
done
[ -s "$work/peer.csv" ] && awk 'NR > 1 && !/^gpu,/' "$work/peer.csv" >>"$out/gpu-vs-peer.csv"

section "4. attention alone against sdpa-flash and FlexAttention (forward + backward, bf16)"
python3 scripts/perf_csv.py header attention >"$out/attention-vs-flash.csv"
if wanted 4 && [ -x "$bench" ]; then
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # lengths and batch
    set -- $shape
    run_for 75 "$bench" attention --device $device --dtype $precision --backward --lengths "$1" \
      --batch "$2" --heads 8 --dim 64 --variants "$variants" --repeats 5 --timeout $((30 * scale)) \
      --max-mib 0 --out "$work/attention-$1.csv" || echo "attention L $1: exit status $?"
  done
  files=()
  for f in "$work"/attention-*.csv; do [ -s "$f" ] && files+=("$f"); done
  if [ ${#files[@]} -gt 0 ]; then
    python3 scripts/perf_csv.py attention --gpu "$gpu" --full-as sdpa-flash "${files[@]}" \
      >>"$out/attention-vs-flash.csv"
    awk 'FNR > 1 || NR == 1' "${files[@]}" >"$out/attention-cuda.csv"
  fi
fi
if wanted 4; then
  # The same cases in FlexAttention, one process per L (torch.compile per shape; a hang loses one).
  for shape in "${attention_shapes[@]}"; do
    # shellcheck disable=SC2086  # lengths and batch
    set -- $shape
    echo "-- flex: L $1, batch $2"
    PYTHONUNBUFFERED=1 run_for 120 python3 scripts/peer_flex.py attention --lengths "$1" \
      --batch "$2" --heads 8 --dim 64 --variants combiner-fixed,combiner-axial-rowmajor \
      --repeats 5 "${flex_pass[@]}" --csv "$work/flex-attention.csv" ||
      echo "flex attention L $1: exit status $?"
  done
  [ -s "$work/flex-attention.csv" ] &&
    awk 'NR > 1 && !/^gpu,/' "$work/flex-attention.csv" >>"$out/attention-vs-flash.csv"
fi

section "5. quick-start config: fused kernels against the LibTorch path (validation bits/dim)"
echo "attention_path,val_bpd,seconds,status" >"$out/fused-vs-libtorch.csv"
fashion=""
for d in /usr/share/datasets/fashion-mnist .cache/fashion-mnist; do
  if [ -s "$d/train-images-idx3-ubyte.gz" ] || [ -s "$d/train-images-idx3-ubyte" ]; then
    fashion=$d
    break
  fi
done
if ! wanted 5; then
  echo "not asked for (COMBINER_GPU_STAGES=$stages)"
elif [ ! -x "$train" ]; then
  echo "quick-start: no $train; skipped"
elif [ -z "$fashion" ]; then
  echo "quick-start: no Fashion-MNIST (carry .cache/fashion-mnist, a copy of /usr/share/datasets/fashion-mnist); skipped"
else
  declare -A bpd=()
  for path in auto composed; do
    run="$work/quick-$path" log="$work/quick-$path.log" started=$SECONDS
    echo "-- combiner-train configs/fashion_mnist.yaml, train.attention_path=$path"
    run_for 150 "$train" --config configs/fashion_mnist.yaml --set data.dir="$fashion" \
      --set train.device=$device --set train.out_dir="$run" --set train.attention_path=$path \
      --set train.sample_every=0 --set train.final_test=false --set train.tensorboard=false \
      "${quick_shrink[@]}" >"$log" 2>&1
    code=$?
    grep -E "attention|parameters|val bpd|error" "$log" | head -8
    value=$(grep -o '"val_bpd": [^,}]*' "$run/metrics.jsonl" 2>/dev/null | tail -1 | sed 's/.*: //')
    status=ok
    [ "$code" -eq 0 ] && [ -n "$value" ] || status=$(status_of "$code" "$log")
    [ "$status" = ok ] && bpd[$path]=$value
    echo "$path,$value,$((SECONDS - started)),$status" >>"$out/fused-vs-libtorch.csv"
  done
  if [ -n "${bpd[auto]:-}" ] && [ -n "${bpd[composed]:-}" ]; then
    verdict=$(awk -v a="${bpd[auto]}" -v b="${bpd[composed]}" \
      'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.6f,%s", d, (d <= 0.01 ? "pass" : "FAIL") }')
    echo "difference,${verdict%,*},,${verdict#*,}" >>"$out/fused-vs-libtorch.csv"
    echo "quick-start: val bpd fused ${bpd[auto]}, LibTorch ${bpd[composed]}: |difference| ${verdict%,*} (<= 0.01: ${verdict#*,})"
  fi
fi

section "6. cached sampling: 16 CIFAR-10 images from a fresh 6 x 512 model"
echo "gpu,config,L,images,seconds,images_per_s,status" >"$out/sampling-cuda.csv"
config=configs/cifar10_ablation_combiner_axial_rowmajor.yaml
if ! wanted 6; then
  echo "not asked for (COMBINER_GPU_STAGES=$stages)"
elif [ -x "$sample" ]; then
  log="$work/sample.log"
  run_for 120 "$sample" --config "$config" --num "$sample_count" --seed 0 \
    --set train.device=$device "${sample_shrink[@]}" --out "$work/samples.png" 2>&1 | tee "$log"
  code=${PIPESTATUS[0]}
  rate=$(sed -n 's/.*: \([0-9.]*\) images\/s$/\1/p' "$log")
  L=$(sed -n 's/.* of L = \([0-9]*\) .*/\1/p' "$log")
  seconds=$(sed -n 's/.* in \([0-9.]*\)s (.*/\1/p' "$log")
  status=ok
  [ "$code" -eq 0 ] && [ -n "$rate" ] || status=$(status_of "$code" "$log")
  echo "$gpu,$(basename "$config" .yaml),$L,$sample_count,$seconds,$rate,$status" >>"$out/sampling-cuda.csv"
else
  echo "sampling: no $sample; skipped"
fi

section "7. the 128-layer CIFAR-10 preset (bf16)"
deep=$(grep -l "layers: 128" configs/*.yaml | head -1)  # cifar_axial.yaml today
echo "preset: ${deep:-none found in configs/}"
if wanted 7 && [ -x "$bench" ] && [ -n "$deep" ]; then
  for checkpointing in true false; do
    echo "-- activation checkpointing $checkpointing"
    log="$work/128.log"
    run_for 90 "$bench" train --config "$deep" --steps 3 --warmup 1 \
      --matmul-size $matmul --set train.device=$device --set train.precision=$precision \
      --set train.activation_checkpointing=$checkpointing "${ours_128[@]}" \
      --out "$work/128-$checkpointing.csv" 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    # The preset as configured (checkpointing on) is also a row of gpu-vs-peer.csv, shape
    # cifar10-128x256 (perf_csv.py names it from the row's dataset, layers and width).
    if [ "$code" -eq 0 ]; then
      awk 'NR > 1' "$work/128-$checkpointing.csv" >>"$out/train-cuda.csv"
      [ "$checkpointing" = true ] && python3 scripts/perf_csv.py ours --gpu "$gpu" \
        "$work/128-$checkpointing.csv" >>"$out/gpu-vs-peer.csv"
    else
      echo "128 layers, checkpointing $checkpointing: $(status_of "$code" "$log")"
      [ "$checkpointing" = true ] && python3 scripts/perf_csv.py ours --gpu "$gpu" \
        --status "$(status_of "$code" "$log")" --shape cifar10-128x256 \
        --attention "$(sed -n 's/.*type: \([a-z-]*\).*/\1/p' "$deep" | head -1)" --L 3072 \
        --batch "$(sed -n 's/^  batch_size: //p' "$deep" | head -1)" --precision "$precision" \
        >>"$out/gpu-vs-peer.csv"
    fi
  done
fi

section "8. the peer under torch.compile"
rm -f "$work/peer.csv"
for shape in "${shapes[@]}"; do
  wanted 8 || break
  # shellcheck disable=SC2086  # dataset, L, batch
  set -- $shape
  PEER_TIMEOUT=170 peer "$2" "$3" --compile
done
[ -s "$work/peer.csv" ] && awk 'NR > 1 && !/^gpu,/' "$work/peer.csv" >>"$out/gpu-vs-peer.csv"

section "9. profiles: the largest GPU kernels per step"
if wanted 9 && [ -x "$bench" ]; then
  # shellcheck disable=SC2086  # L, batch of the middle attention shape (12288 8 on a GPU)
  set -- ${attention_shapes[1]}
  run_for 100 "$bench" attention --device $device --dtype $precision --backward --batch "$2" \
    --heads 8 --dim 64 --lengths "$1" --repeats 3 --profile 15 --timeout 60 --max-mib 0 \
    --variants combiner-fixed,combiner-axial-rowmajor,combiner-axial-vertical,combiner-axial-horizontal \
    --out "$work/profile-attention.csv" 2>&1 | grep -vE "^\[|^results:"
  # shellcheck disable=SC2086  # dataset, L, batch: ImageNet-64's on a GPU
  set -- ${shapes[1]:-${shapes[0]}}
  run_for 60 "$bench" train --config "configs/$1_ablation_combiner_axial_rowmajor.yaml" \
    --steps 2 --warmup 1 --profile 15 --matmul-size 256 --set train.device=$device \
    --set train.precision=$precision --set train.batch_size="$3" "${ours_shrink[@]}" 2>&1 |
    grep -v "^\["
  [ -n "$deep" ] && run_for 60 "$bench" train --config "$deep" --steps 2 --warmup 1 \
    --profile 15 --matmul-size 256 --set train.device=$device --set train.precision=$precision \
    "${ours_128[@]}" 2>&1 | grep -v "^\["
fi

section "done in $((SECONDS - begin)) s"
for f in gpu-vs-peer attention-vs-flash fused-vs-libtorch sampling-cuda; do
  echo "-- $f.csv"
  column -s, -t <"$out/$f.csv" 2>/dev/null || cat "$out/$f.csv"
done
rm -rf "$work"
sleep 1  # lets tee write the log's last lines before OUT is collected
