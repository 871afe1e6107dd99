// What the ops' warp-per-row kernels (layer_norm_kernel.cu, norm_linear_kernel.cu,
// cross_entropy_kernel.cu) share: a float read or written in a tensor's dtype (bfloat16 exactly,
// or rounded to nearest even), and a warp's butterfly reductions, after which every lane holds
// the same value (lane l combines lane l ^ o's, o = 16, 8, 4, 2, 1).
#pragma once

#include <cstdint>

#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {

__device__ __forceinline__ float load_float(const float* p, int64_t i) {
  return p[i];
}
__device__ __forceinline__ float load_float(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ __forceinline__ void store_float(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ __forceinline__ void store_float(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace combiner::ops::cuda_detail
