#!/usr/bin/env bash
# Data at ImageNet-64's scale (docs/PERFORMANCE.md, "Data at scale"): how long combiner-train
# takes from launch to its data-ready line, and its resident memory, on
#   1. a packed file of ImageNet-64's exact shape and count (1,281,149 random 64x64x3 images,
#      15.7 GB, written by scripts/make_synthetic_packed.py) read by memory map;
#   2. today's in-memory loader on the largest published-format set that fits beside it here
#      (image-net.org npz batches, --npz-count images) and on a PNG folder (--png-count images);
#   3. two processes of scripts/launch.sh -n 2 on the packed file: each one's private memory and
#      the page cache they share.
# Each run is the 6 x 512 ImageNet-64 ablation model (combiner-axial-rowmajor) at batch 1 (one
# image per process), one step, with activation checkpointing (without it the model's own
# activations at L = 12288 take ~5 GB whatever the loader; one packed run shows that too).
# A benchmark, never part of the tests: it needs ~20 GB of disk and a quiet machine.
#
#   scripts/bench-data.sh WORK_DIR [--count N] [--npz-count N] [--png-count N] [--out CSV]
#
# WORK_DIR keeps the generated files between runs. Rows go to CSV (default
# docs/perf/data-startup.csv): loader,images,process,ready_s,rest_s,rss_anon_mib,rss_file_mib,
# peak_rss_mib; ready_s is launch to "... ready in" (0.1 s polls), rest_s from then to the exit
# (model, the step, the final checkpoint, which waits for a background checksum), the RSS columns
# are the largest values sampled from /proc/PID/status every 0.1 s (RssAnon: private memory;
# RssFile: mapped file pages, which belong to the page cache and are shared), peak_rss_mib is
# VmHWM.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:?usage: scripts/bench-data.sh WORK_DIR [--count N] [--npz-count N] [--png-count N] [--out CSV]}
shift
count=1281149 npz_count=256000 png_count=20000 out=docs/perf/data-startup.csv
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count=$2; shift 2 ;;
    --npz-count) npz_count=$2; shift 2 ;;
    --png-count) png_count=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-data.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
./scripts/build.sh combiner-train combiner-data >/dev/null
py=/usr/bin/python3
mkdir -p "$work/packed" "$work/npz" "$work/png/train" "$work/png/valid" "$(dirname "$out")"

echo "== data (kept in $work between runs)"
if [ ! -f "$work/packed/train.pack" ]; then
  $py scripts/make_synthetic_packed.py --dataset imagenet64 --count "$count" \
    --out "$work/packed/train.pack"
  $py scripts/make_synthetic_packed.py --dataset imagenet64 --count 49999 --seed 1 \
    --out "$work/packed/test.pack"
fi
build/combiner-data info "$work/packed/test.pack" | tail -1
if [ ! -f "$work/npz/val_data.npz" ]; then
  $py - "$work/npz" "$npz_count" <<'EOF'
import sys
import numpy as np
folder, total = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(2)
for i in range(10):  # image-net.org's layout: 10 train batches of channel-planar rows
    n = total // 10 + (i < total % 10)
    np.savez(f"{folder}/train_data_batch_{i + 1}.npz",
             data=np.frombuffer(rng.bytes(n * 12288), np.uint8).reshape(n, 12288))
np.savez(f"{folder}/val_data.npz", data=np.zeros((1000, 12288), np.uint8))
EOF
fi
if [ ! -f "$work/png/valid/0.png" ]; then
  $py - "$work/png" "$png_count" <<'EOF'
import struct, sys, zlib
import numpy as np
folder, total = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(3)
def png(pixels):  # 64x64 RGB, filter 0 per row, as ImageNet's files are (8-bit RGB)
    raw = b"".join(b"\0" + pixels[r].tobytes() for r in range(64))
    chunk = lambda kind, data: (struct.pack(">I", len(data)) + kind + data +
                                struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
for i in range(total):
    with open(f"{folder}/train/{i:08d}.png", "wb") as f:
        f.write(png(np.frombuffer(rng.bytes(12288), np.uint8).reshape(64, 192)))
for i in range(10):
    with open(f"{folder}/valid/{i}.png", "wb") as f:
        f.write(png(np.zeros((64, 192), np.uint8)))
EOF
fi

# One combiner-train run (or a launch.sh -n 2 pair) sampled every 0.1 s; appends CSV rows.
run_and_sample() {  # loader images val_size nproc data_dir activation_checkpointing
  local loader=$1 images=$2 val=$3 nproc=$4 dir=$5 recompute=${6:-true} log run start ready="" now
  run=$(mktemp -d)
  log=$run/log
  local cmd=(build/combiner-train --config configs/imagenet64_ablation_combiner_axial_rowmajor.yaml
    --set data.dir="$dir" --set data.val_size="$val" --set train.batch_size="$nproc"
    --set train.steps=1 --set train.warmup_steps=1 --set train.log_every=1
    --set train.activation_checkpointing="$recompute"
    --set train.eval_every=0 --set train.sample_every=0 --set train.checkpoint_every=0
    --set train.final_test=false --set train.out_dir="$run/run")
  start=$(date +%s.%N)
  if [ "$nproc" -gt 1 ]; then
    scripts/launch.sh -n "$nproc" -- "${cmd[@]}" >"$log" 2>&1 &
  else
    "${cmd[@]}" >"$log" 2>&1 &
  fi
  local top=$!
  declare -A anon file hwm
  while kill -0 "$top" 2>/dev/null; do
    now=$(date +%s.%N)
    if [ -z "$ready" ] && grep -q "ready in" "$log"; then ready=$(echo "$now - $start" | bc); fi
    for pid in $(pgrep -f '^build/combiner-train ' || true); do
      [ -r "/proc/$pid/status" ] || continue
      read -r a f h < <(awk '/^RssAnon/{a=$2}/^RssFile/{f=$2}/^VmHWM/{h=$2}END{print a+0, f+0, h+0}' \
        "/proc/$pid/status" 2>/dev/null || echo "0 0 0")
      [ "${anon[$pid]:-0}" -ge "$a" ] || anon[$pid]=$a
      [ "${file[$pid]:-0}" -ge "$f" ] || file[$pid]=$f
      [ "${hwm[$pid]:-0}" -ge "$h" ] || hwm[$pid]=$h
    done
    sleep 0.1
  done
  wait "$top" || { echo "$loader: combiner-train failed:"; tail -5 "$log"; rm -rf "$run"; return 1; }
  local end rest_s
  end=$(date +%s.%N)
  rest_s=$(echo "$end - $start - ${ready:-0}" | bc)
  grep -E "ready in|data: mapped|step +1/" "$log" | head -4
  local p=0
  for pid in "${!anon[@]}"; do
    printf '%s,%s,%s,%.1f,%.1f,%.0f,%.0f,%.0f\n' "$loader" "$images" "$p" "${ready:-nan}" \
      "$rest_s" "$(echo "${anon[$pid]} / 1024" | bc -l)" "$(echo "${file[$pid]} / 1024" | bc -l)" \
      "$(echo "${hwm[$pid]} / 1024" | bc -l)" | tee -a "$out"
    p=$((p + 1))
  done
  rm -rf "$run"
}

echo "loader,images,process,ready_s,rest_s,rss_anon_mib,rss_file_mib,peak_rss_mib" >"$out"
grep -m1 "model name" /proc/cpuinfo | sed 's/.*: /cpu: /'
echo "== packed, memory-mapped: $count images"
run_and_sample packed-mmap "$count" 10000 1 "$work/packed"
echo "== the same without activation checkpointing: the model's activations, not the data"
run_and_sample packed-mmap-no-recompute "$count" 10000 1 "$work/packed" false
echo "page cache holding train.pack after the run: $(fincore -n -o RES "$work/packed/train.pack")"
echo "== published npz, in memory: $npz_count images"
run_and_sample npz-in-memory "$npz_count" 1000 1 "$work/npz"
echo "== published PNG folder, in memory: $png_count images"
run_and_sample png-in-memory "$png_count" 10 1 "$work/png"
echo "== two processes (launch.sh -n 2) on the packed file"
grep -E "^(MemAvailable|Cached)" /proc/meminfo
run_and_sample packed-mmap-2proc "$count" 10000 2 "$work/packed"
grep -E "^(MemAvailable|Cached)" /proc/meminfo
echo "rows: $out"
