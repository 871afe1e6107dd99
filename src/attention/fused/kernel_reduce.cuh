// Warp and block reductions of the fused family's small kernels (the decode step, the span
// summaries): every lane, or every thread of the block, gets the result.
#pragma once

#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The sum or max of x over a block of WARPS warps (every thread gets it). `slots` holds WARPS
// floats that the block reads after this returns: a second reduction takes other slots.
template <bool MAX, int WARPS>
__device__ float block_reduce(float x, float* slots) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = MAX ? warp_max(x) : warp_sum(x);
  if (lane == 0) slots[warp] = x;
  __syncthreads();
  float all = slots[0];
  for (int w = 1; w < WARPS; ++w) all = MAX ? fmaxf(all, slots[w]) : all + slots[w];
  return all;
}

}  // namespace combiner::attention::fused::cuda_detail
