#!/usr/bin/env bash
# The CPU comparison against today's PyTorch, in one run on one machine: ours (combiner-bench
# train, combiner-axial-rowmajor and full) and the plain-PyTorch peer (scripts/peer_gpu.py, driven
# through its flags, in the environment of scripts/setup-cuda-deps.sh: torch 2.11, causal
# F.scaled_dot_product_attention, eager and torch.compile), 6 layers x 512, 8 heads, MLP 4,
# CIFAR-10's shape (L = 3072), batch 2, fp32, random tokens. Before timing anything it checks that
# both models have the same parameter count. Writes scripts/perf_csv.py's peer table,
#   gpu,shape,L,batch,system,attention,precision,ms_per_step,tokens_per_s,peak_mib,status
# (gpu is "cpu"; peak_mib is each process's peak resident set, the peer's with Python and torch
# loaded), to docs/perf/cpu-vs-peer.csv. A stage that fails or outlives --timeout leaves a row
# with empty numbers and status failed or timeout, and the script goes on.
# Usage: scripts/bench-cpu-peer.sh [--python PY] [--threads T] [--steps N] [--warmup N]
#                                  [--timeout S] [--build DIR] [--out CSV] [--no-compile] [--toy]
#   --python   default ${COMBINER_VENV:-.cache/torch-venv}/bin/python
#   --threads  threads for both (default: every core, nproc)
#   --toy      1 layer x 16 wide, 2 heads, 1 step without warm-up: checks the plumbing in seconds;
#              its numbers mean nothing, so it needs an --out of its own
set -euo pipefail
cd "$(dirname "$0")/.."
python=${COMBINER_VENV:-.cache/torch-venv}/bin/python
threads=$(nproc) steps=3 warmup=1 timeout_s=3600 build=build out="" compile=1 toy=0
die() {
  echo "bench-cpu-peer: $*" >&2
  exit 1
}
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --no-compile) compile=0; shift ;;
    --toy) toy=1; shift ;;
    *) echo "bench-cpu-peer: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x "$python" ] ||
  die "--python: '$python' is not an executable (run scripts/setup-cuda-deps.sh, or pass --python)"
"$python" -c 'import sys, torch.nn.functional as F
sys.exit(not hasattr(F, "scaled_dot_product_attention"))' 2>/dev/null ||
  die "--python: '$python' has no torch with F.scaled_dot_product_attention (torch >= 2 expected)"
bench="$build/combiner-bench"
[ -x "$bench" ] || die "$bench not built (ninja -C $build combiner-bench)"

layers=6 width=512 heads=8 mlp=4 batch=2 length=3072 matmul=()
if [ "$toy" = 1 ]; then
  [ -n "$out" ] || die "--toy: pass --out FILE (toy numbers never go to docs/perf)"
  layers=1 width=16 heads=2 mlp=2 steps=1 warmup=0 matmul=(--matmul-size 64)
fi
out=${out:-docs/perf/cpu-vs-peer.csv}
shape="cifar10-${layers}x${width}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"

status_of() {
  case "$1" in
    0) echo ok ;;
    124 | 137) echo timeout ;;
    *) echo failed ;;
  esac
}

# ours_command ATTENTION [flags...], peer_command SYSTEM [flags...]: the command line of one
# combiner-bench train run or one scripts/peer_gpu.py run, into the array `command`; each writes
# its CSV into $work.
ours_command() {
  local attention=$1
  shift
  command=("$bench" train --config configs/cifar10_ablation_combiner_axial_rowmajor.yaml
    --set model.attention.type="$attention" --set model.layers=$layers --set model.width=$width
    --set model.heads=$heads --set model.mlp_ratio=$mlp --set train.batch_size=$batch
    --set train.grad_accum=1 --threads "$threads" --out "$work/ours-$attention.csv" "$@")
}
peer_command() {
  local system=$1
  shift
  # A compile cache of its own: torch.compile's shared /tmp/torchinductor_<user> is also written by
  # other processes, and a compile here once failed on a precompiled header missing from it.
  command=(env PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR="$work/inductor" "$python"
    scripts/peer_gpu.py --device cpu --precision float32
    --layers $layers --width $width --heads $heads --mlp $mlp --length $length --batch $batch
    --threads "$threads" --csv "$work/$system.csv" "$@")
}

echo "== the same model: parameter counts (one untimed step each)"
ours_command combiner-axial-rowmajor --steps 1 --warmup 0 --matmul-size 64
"${command[@]}" >"$work/check-ours.log" 2>&1 ||
  die "combiner-bench train failed: $(tail -3 "$work/check-ours.log")"
ours_parameters=$("$python" -c 'import csv, sys
print(next(csv.DictReader(open(sys.argv[1])))["parameters"])' "$work/ours-combiner-axial-rowmajor.csv")
peer_command check --steps 1 --warmup 0
"${command[@]}" >"$work/check-peer.log" 2>&1 ||
  die "scripts/peer_gpu.py failed: $(tail -3 "$work/check-peer.log")"
peer_parameters=$(sed -n 's/^peer: .*, \([0-9]*\) parameters$/\1/p' "$work/check-peer.log")
echo "parameters: ours $ours_parameters, peer $peer_parameters"
[ "$ours_parameters" = "$peer_parameters" ] ||
  die "ours has $ours_parameters parameters, the peer $peer_parameters: not the same model"
rm -f "$work"/*.csv

"$python" scripts/perf_csv.py header peer >"$out"
for attention in combiner-axial-rowmajor full; do
  echo "== ours, $attention"
  ours_command "$attention" --steps "$steps" --warmup "$warmup" "${matmul[@]}"
  rc=0
  timeout "$timeout_s" "${command[@]}" || rc=$?
  if [ "$rc" = 0 ]; then
    "$python" scripts/perf_csv.py ours --gpu cpu "$work/ours-$attention.csv" >>"$out"
  else
    "$python" scripts/perf_csv.py ours --gpu cpu --status "$(status_of $rc)" --shape "$shape" \
      --attention "$attention" --L $length --batch $batch --precision float32 >>"$out"
  fi
done
systems=(peer-eager)
[ "$compile" = 1 ] && systems+=(peer-compile)
for system in "${systems[@]}"; do
  echo "== the peer, $system"
  if [ "$system" = peer-compile ]; then
    # torch.compile compiles during the first step: one more untimed step.
    peer_command "$system" --steps "$steps" --warmup $((warmup + 1)) --compile
  else
    peer_command "$system" --steps "$steps" --warmup "$warmup"
  fi
  rc=0
  timeout "$timeout_s" "${command[@]}" || rc=$?
  if [ "$rc" = 0 ]; then
    awk 'NR > 1' "$work/$system.csv" >>"$out"
  else
    echo "cpu,$shape,$length,$batch,$system,sdpa-causal,float32,,,,$(status_of $rc)" >>"$out"
  fi
done
echo "== $out"
cat "$out"
