// One element of a fused kernel's storage dtype (float32 or bfloat16) as float32, and a float32
// back into one (rounded to nearest even): the element-at-a-time conversions of the scans, the
// decode step and a pooled pass's running max; and a segment max's dy read as float32.
#pragma once

#include <type_traits>

#include "attention/fused/kernel.h"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

__device__ __forceinline__ float scalar_float(float x) {
  return x;
}
__device__ __forceinline__ float scalar_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T scalar_as(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return __float2bfloat16(x);
}

// dy[g] of a segment max's backward line (bh, g, d) as float32: the sum of its slabs, slab 0
// first (kernel_scan.h segment_max_dy_at), each stored in float (dy_acc) or in x's dtype T.
template <typename T>
__device__ __forceinline__ float segment_max_dy(const SegmentMax& m,
                                                int64_t bh,
                                                int64_t g,
                                                int64_t d) {
  float sum = 0.f;
#pragma unroll 4  // the loads of four slabs in flight, their sum still in slab order
  for (int64_t slab = 0; slab < m.dy_slabs; ++slab) {
    const int64_t i = segment_max_dy_at(m, bh, slab, g, d);
    const float part = m.dy_acc ? static_cast<const float*>(m.dy)[i]
                                : scalar_float(static_cast<const T*>(m.dy)[i]);
    sum = slab == 0 ? part : sum + part;
  }
  return sum;
}

}  // namespace combiner::attention::fused::cuda_detail
