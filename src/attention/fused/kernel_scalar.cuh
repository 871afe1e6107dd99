// One element of a fused kernel's storage dtype (float32 or bfloat16) as float32, and a float32
// back into one (rounded to nearest even): the element-at-a-time conversions of the scans, the
// decode step and a pooled pass's running max.
#pragma once

#include <type_traits>

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

}  // namespace combiner::attention::fused::cuda_detail
