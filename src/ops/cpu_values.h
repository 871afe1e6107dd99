// The CPU models' reads and writes of a kernel's tensors, float32 or bfloat16 (ops::Dtype), as
// the kernels do them: a bfloat16 read exactly, a write rounded to nearest even.
#pragma once

#include <cstdint>

#include "ops/layer_norm_kernel.h"
#include "util/bfloat16.h"

namespace combiner::ops {

inline float load_value(const void* p, Dtype dtype, int64_t i) {
  return dtype == Dtype::kBFloat16 ? util::bf16_to_float(static_cast<const uint16_t*>(p)[i])
                                   : static_cast<const float*>(p)[i];
}

// Writes v in dtype and returns the value written.
inline float store_value(void* p, Dtype dtype, int64_t i, float v) {
  if (dtype != Dtype::kBFloat16) return static_cast<float*>(p)[i] = v;
  const uint16_t bits = util::float_to_bf16(v);
  static_cast<uint16_t*>(p)[i] = bits;
  return util::bf16_to_float(bits);
}

}  // namespace combiner::ops
