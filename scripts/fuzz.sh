#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang (ASan + UBSan) in build-fuzz/, writes seed
# corpora of small valid files, and runs each target for a bounded time.
#
#   scripts/fuzz.sh [--seconds N] [target...]
#
# Targets (default: all): config fashion_mnist cifar10 packed imagenet64_npz imagenet64_png
# image_decode npy checkpoint safetensors. Each runs N seconds (default 60). The corpus of each
# target grows across runs in build-fuzz/corpus/<target>; a crash, leak, timeout or sanitizer
# report leaves the input in build-fuzz/artifacts/ and makes the script exit non-zero. Reproduce
# one with build-fuzz/<target>_fuzz build-fuzz/artifacts/<file>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=60
all_targets=(config fashion_mnist cifar10 packed imagenet64_npz imagenet64_png image_decode npy
             checkpoint safetensors)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *)
      if [[ " ${all_targets[*]} " != *" $1 "* ]]; then
        echo "fuzz.sh: unknown target '$1'; targets: ${all_targets[*]}" >&2
        exit 2
      fi
      targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [ "$seconds" -lt 1 ]; then
  echo "fuzz.sh: --seconds must be a positive integer, got '$seconds'" >&2
  exit 2
fi

# The project's own dependencies (LibTorch, yaml-cpp, ...): installs only what is missing.
./scripts/setup-deps.sh

# clang with libFuzzer and the sanitizer runtimes. Debian 12's clang is 14; install it only
# if it is not there already, the way setup-deps.sh installs packages.
find_clang() {
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null 2>&1 &&
       echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
         "$c" -x c++ -fsanitize=fuzzer,address,undefined -o /dev/null - >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
if ! clang=$(find_clang); then
  echo "fuzz.sh: installing clang-14 and its libFuzzer runtime"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev
  clang=$(find_clang) || { echo "fuzz.sh: clang cannot build libFuzzer targets" >&2; exit 1; }
fi

build=build-fuzz
cmake -S fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$clang" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" make_seeds "${targets[@]/%/_fuzz}"

rm -rf "$build/seeds"
"$build/make_seeds" "$build/seeds"
mkdir -p "$build/artifacts" "$build/logs"

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
summary=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  mkdir -p "$corpus"
  options=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
           -artifact_prefix="$root/$build/artifacts/$t-")
  case "$t" in
    config) options+=(-dict="$build/seeds/config.dict" -max_len=4096) ;;
    imagenet64_npz|imagenet64_png|image_decode|checkpoint) options+=(-max_len=65536) ;;
    cifar10|fashion_mnist|npy|safetensors) options+=(-max_len=16384) ;;
  esac
  echo "=== $t: ${seconds}s"
  status=0
  "$build/${t}_fuzz" "${options[@]}" "$corpus" "$build/seeds/$t" >"$build/logs/$t.log" 2>&1 || status=$?
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$build/logs/$t.log" | tail -1 || true)
  runs=$(grep -E '^stat::number_of_executed_units' "$build/logs/$t.log" | awk '{print $2}' || true)
  files=$(find "$corpus" -type f | wc -l)
  if [ "$status" -ne 0 ]; then
    failed+=("$t")
    summary+=("$t: FAILED (exit $status), see $build/logs/$t.log and $build/artifacts/")
    grep -E 'ERROR|FUZZ BUG|SUMMARY|runtime error|Test unit written' "$build/logs/$t.log" | head -8 || true
  else
    stats=$(echo "$done_line" | sed -E 's/.*DONE[[:space:]]+//; s/[[:space:]]+lim:.*//')
    summary+=("$t: ok, ${runs:-?} runs in ${seconds}s, ${stats:-no stats}; corpus $files files")
  fi
done

echo
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failures in ${failed[*]}" >&2
  exit 1
fi
