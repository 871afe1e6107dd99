// What a kernel source (*.cu, *.cuh) includes in place of <cuda_runtime.h> and <cuda_bf16.h>: the
// real headers under nvcc, the CPU's SIMT emulator (simt/emulator.h) anywhere else, so the same
// source runs in this project's tests on a machine without a GPU. Two spellings differ between
// the two and are macros here:
//   COMBINER_DYNAMIC_SHARED(type, name);                     extern __shared__ type name[]
//   COMBINER_LAUNCH(grid, block, smem, stream, kernel)(args)  kernel<<<grid, block, smem, stream>>>
//   COMBINER_NOINLINE                                         __noinline__ (a call, not inlined:
//     its registers allocated apart from its caller's)
#pragma once

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define COMBINER_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#define COMBINER_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define COMBINER_NOINLINE __noinline__
#else
#include "simt/emulator.h"

#define COMBINER_NOINLINE __attribute__((noinline))

#define COMBINER_DYNAMIC_SHARED(type, name) \
  type* const name = ::combiner::simt::dynamic_shared<type>()
#define COMBINER_LAUNCH(grid, block, smem, stream, ...) \
  ::combiner::simt::Launch(__VA_ARGS__, grid, block, smem, stream)
#endif
