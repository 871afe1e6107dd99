// bfloat16 storage without torch (the fused kernels' CPU models): the high half of a float32,
// rounded to nearest even as CUDA's __float2bfloat16 rounds; a NaN stays a (quiet) NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace combiner::util {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// A bfloat16 storage element for the CPU models' templates, and the conversions between a
// storage type S (float, double or BFloat16) and an arithmetic type T.
struct BFloat16 {
  uint16_t bits = 0;
};
template <typename S, typename T>
T to_math(S x) {
  if constexpr (std::is_same_v<S, BFloat16>)
    return T(bf16_to_float(x.bits));
  else
    return T(x);
}
template <typename S, typename T>
S to_storage(T x) {
  if constexpr (std::is_same_v<S, BFloat16>)
    return BFloat16{float_to_bf16(float(x))};
  else
    return S(x);
}

}  // namespace combiner::util
