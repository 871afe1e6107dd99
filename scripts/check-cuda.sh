#!/usr/bin/env bash
# Compile-checks the CUDA side without a GPU (this machine has nvcc but no device):
#   1. every src/attention/fused/*.cu and src/ops/*.cu with nvcc for sm_90, ptxas -v: one line
#      per kernel with its registers, stack frame and spill bytes (dynamic shared memory is set at
#      launch: the sizes are in each .cu file's opening comment); then the bfloat16 attention
#      kernels' tile loops counted in SASS (scripts/sass_loops.py, where a cuobjdump is found);
#   2. the torch glue (src/attention/fused/function.cpp, fused.cpp, pools.cpp, launch.cpp and
#      src/attention/static_decode.cpp with COMBINER_WITH_CUDA_KERNELS; src/ops/layer_norm.cpp,
#      norm_linear.cpp, linear.cpp, cross_entropy.cpp and weight_cast.cpp with
#      COMBINER_WITH_CUDA_OPS) against this machine's LibTorch headers and the CUDA headers
#      (-fsyntax-only), so type errors in the CUDA-only lines show up before anything runs on a
#      GPU.
# Exits non-zero on a compile error, a spill or a stack frame. Not part of scripts/test.sh (CI
# has no nvcc). Usage: scripts/check-cuda.sh [OUT_DIR]   (default: build-check-cuda/)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-check-cuda}
cuda=${CUDA_HOME:-/usr/local/cuda}
arch=${COMBINER_CHECK_ARCH:-sm_90}
mkdir -p "$out"
status=0

for cu in src/attention/fused/*.cu src/ops/*.cu; do
  name=$(basename "$cu" .cu)
  if ! "$cuda/bin/nvcc" -arch="$arch" -std=c++17 -O3 -lineinfo -Xptxas -v -Isrc -c "$cu" \
      -o "$out/$name.o" 2>"$out/$name.log"; then
    grep -E "error" "$out/$name.log" | head -20
    echo "check-cuda: $cu: FAILED to compile (full log: $out/$name.log)"
    status=1
    continue
  fi
  # ptxas prints, per kernel: "Compiling entry function '<mangled>'", then the stack/spill line,
  # then the register line.
  awk '/Compiling entry function/ { match($0, /'"'"'[^'"'"']*'"'"'/); fn = substr($0, RSTART + 1, RLENGTH - 2) }
       /bytes stack frame/ { stack = $1; spill = $5 + $9 }
       /Used [0-9]+ registers/ { for (i = 1; i <= NF; ++i) if ($i == "Used") regs = $(i + 1);
                                 print fn, regs, stack, spill }' "$out/$name.log" |
    while read -r fn regs stack spill; do
      pretty=$(echo "$fn" | c++filt | sed -e 's/combiner::attention::fused::cuda_detail:://' \
        -e 's/combiner::ops::cuda_detail::(anonymous namespace):://' \
        -e 's/(combiner::\(attention::fused\|ops\)::[A-Za-z]*\(<[^()]*>\)\{0,1\})//' -e 's/__nv_bfloat16/bf16/')
      flag=""
      if [ "$spill" != 0 ] || [ "$stack" != 0 ]; then flag="  <-- local memory"; fi
      printf '%-34s %-28s %4s registers, %4s B stack, %4s B spilled%s\n' "$name.cu" "$pretty" \
        "$regs" "$stack" "$spill" "$flag"
      if [ -n "$flag" ]; then echo "spill" >>"$out/spills"; fi
    done
done
# The attention kernels' tile loops in SASS (scripts/sass_loops.py: instructions per key or
# query tile and warp, and how many are tensor-core ones), where a cuobjdump is at hand.
for name in kernel_forward kernel_backward; do
  if [ -f "$out/$name.o" ]; then
    python3 scripts/sass_loops.py "$out/$name.o" bf16 2>&1 | sed "s|^|$name.cu: |" || true
  fi
done
if [ -s "$out/spills" ]; then
  echo "check-cuda: some kernels use local memory (see the lines marked above)"
  rm -f "$out/spills"
  status=1
fi

# The glue's CUDA-only lines, against Debian's LibTorch headers (a CPU build, but its headers
# hold ATen/cuda and c10/cuda).
# A CPU build of LibTorch lacks one generated header of c10/cuda: a stub stands in for it.
torch_inc=/usr/include/torch/csrc/api/include
stub="$out/stub/c10/cuda/impl"
mkdir -p "$stub"
[ -f /usr/include/c10/cuda/impl/cuda_cmake_macros.h ] ||
  printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$stub/cuda_cmake_macros.h"
for glue in src/attention/fused/function.cpp src/attention/fused/fused.cpp \
  src/attention/fused/pools.cpp src/attention/fused/launch.cpp src/attention/static_decode.cpp \
  src/ops/layer_norm.cpp src/ops/norm_linear.cpp src/ops/linear.cpp src/ops/cross_entropy.cpp \
  src/ops/weight_cast.cpp; do
  define=COMBINER_WITH_CUDA_KERNELS
  [[ "$glue" == src/ops/* ]] && define=COMBINER_WITH_CUDA_OPS
  if g++ -std=c++17 -fsyntax-only -Wall -Wextra -Wno-unused-parameter -D$define \
      -Isrc -I"$torch_inc" -I"$cuda/include" -I"$out/stub" "$glue" 2>"$out/glue.log"; then
    echo "check-cuda: $glue with $define: ok"
  else
    grep -E "error" "$out/glue.log" | head -20
    echo "check-cuda: $glue with $define: FAILED ($out/glue.log)"
    status=1
  fi
done
exit $status
