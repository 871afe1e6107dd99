// The CPU models' dtype switch (kernel_cpu.cpp: the passes; kernel_scan_cpu.cpp: the pools).
#pragma once

#include "attention/fused/kernel.h"
#include "util/bfloat16.h"

namespace combiner::attention::fused::cpu_model {

// fn(storage, math): float32 and float64 compute in their own type, bfloat16 (stored as
// util::BFloat16, rounded to nearest even as __float2bfloat16) in float32.
template <typename Fn>
void dispatch(Dtype dtype, Fn&& fn) {
  if (dtype == Dtype::kFloat32) return fn(float{}, float{});
  if (dtype == Dtype::kFloat64) return fn(double{}, double{});
  return fn(util::BFloat16{}, float{});
}

}  // namespace combiner::attention::fused::cpu_model
