// src/ops/weight_cast_kernel.cu, the kernel's own source, built for the SIMT emulator
// (simt/emulator.h): the CPU build's tests run it on host memory (tests/emulated/). Built only
// where the CUDA kernels are not.
#include "ops/weight_cast_kernel.cu"
