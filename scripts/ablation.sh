#!/usr/bin/env bash
# The paper's same-architecture ablation (its Table 1) at small scale: one architecture and
# budget, every attention variant, the same steps, batch and seeds; test bits/dim on the whole
# test split. Writes into OUT (default docs/results/<dataset>):
#   ablation.csv      one row per run: variant, seed, test bits/dim, parameters, ms/step, peak MiB
#   summary.csv       per variant: mean and spread (max - min) over seeds, and the rest
#   val-curves.png    validation bits/dim against step, mean over seeds, one line per variant
#   samples-<variant>.png   16 images from the seed-0 model of each variant (cached sampler)
#   heatmap-<variant>.png   mean test bits per subpixel, for full and the best Combiner variant
# Runs (checkpoints, logs, metrics) go to runs/ablation/<dataset>/.
# Usage: scripts/ablation.sh [--steps N] [--seeds K] [--dataset fashion_mnist|cifar10]
#                            [--jobs J] [--variants a,b,...] [--out DIR] [--build DIR]
#                            [--device cpu|cuda] [--data DIR]
#   --jobs J runs J trainings at once with cores/J threads each (default 2 on 2 cores: the small
#   models use one core badly). The paper-sized run on GPUs: see docs/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=400 seeds=2 dataset=fashion_mnist jobs=2 build=build out="" device=cpu data=""
variants=full,fixed,combiner-fixed,logsparse,combiner-logsparse,axial,combiner-axial-vertical,combiner-axial-horizontal,combiner-axial-rowmajor,combiner-mixture
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --dataset) dataset="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --variants) variants="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    *) echo "ablation: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$dataset" in
  fashion_mnist) prefix=configs/fashion_mnist_ ;;
  cifar10) prefix=configs/cifar10_ablation_ ;;
  *) echo "ablation: --dataset must be fashion_mnist or cifar10, got '$dataset'" >&2; exit 2 ;;
esac
for n in "$steps" "$seeds" "$jobs"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "ablation: '$n' is not a positive integer" >&2; exit 2; }
done
for b in combiner-train combiner-eval combiner-sample; do
  [ -x "$build/$b" ] || { echo "ablation: $build/$b not built (run scripts/build.sh)" >&2; exit 1; }
done
out=${out:-docs/results/$dataset}
runs=runs/ablation/$dataset
mkdir -p "$out" "$runs"
threads=$(( $(nproc) / jobs )); [ "$threads" -ge 1 ] || threads=1
eval_every=$(( steps / 4 > 0 ? steps / 4 : 1 ))
warmup=$(( steps / 10 < 50 ? steps / 10 : 50 ))
IFS=, read -r -a names <<<"$variants"
for v in "${names[@]}"; do
  [ -f "$prefix${v//-/_}.yaml" ] || { echo "ablation: no config $prefix${v//-/_}.yaml for '$v'" >&2; exit 2; }
done

# One training: its own run folder and log; the last lines of the log hold test_bpd.
train_one() {
  local v=$1 seed=$2 dir="$runs/$1-seed$2"
  rm -rf "$dir"
  "$build/combiner-train" --config "$prefix${v//-/_}.yaml" \
    --set train.steps="$steps" --set train.warmup_steps="$warmup" --set train.seed="$seed" \
    --set train.threads="$threads" --set train.eval_every="$eval_every" \
    --set train.checkpoint_every=0 --set train.sample_every=0 --set train.final_test=true \
    --set train.log_every=50 --set data.val_size=500 --set train.device="$device" \
    ${data:+--set data.dir="$data"} --set train.out_dir="$dir" >"$runs/$v-seed$seed.log" 2>&1 ||
    { echo "ablation: $v seed $seed failed, see $runs/$v-seed$seed.log" >&2; return 1; }
  echo "ablation: $v seed $seed: $(grep -o 'test_bpd: .*' "$runs/$v-seed$seed.log")"
}
export -f train_one
export runs build prefix steps warmup threads eval_every device data

start=$(date +%s)
for v in "${names[@]}"; do
  for ((s = 0; s < seeds; s++)); do echo "$v $s"; done
done | xargs -P "$jobs" -L 1 bash -c 'train_one "$0" "$1"'
echo "ablation: $(( ($(date +%s) - start) / 60 )) min of training and testing"

scripts/install-gnuplot.sh || echo "ablation: no gnuplot; val-curves.dat is kept for plotting"
python3 scripts/ablation_report.py "$runs" "$out" "$steps" "${names[@]}"
best=$(sed -n 's/^best_combiner=//p' "$out/summary.txt")
for v in "${names[@]}"; do
  "$build/combiner-sample" --checkpoint "$runs/$v-seed0/checkpoints/step-$(printf %08d "$steps").ckpt" \
    --num 16 --seed 0 --set train.device="$device" --out "$out/samples-$v.png" >/dev/null
done
for v in full "$best"; do
  "$build/combiner-eval" --checkpoint "$runs/$v-seed0/checkpoints/step-$(printf %08d "$steps").ckpt" \
    --split test --set train.device="$device" ${data:+--set data.dir="$data"} --heatmap "$out/heatmap-$v.png" | tail -1
done
echo "ablation: results in $out"
