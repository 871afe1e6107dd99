// The CPU model of the weight-cast kernel (ops/weight_cast_kernel.h): each tensor's copy in a
// plain loop, rounded as the kernel rounds (util/bfloat16.h), its padding zero.
#include "ops/weight_cast_kernel.h"
#include "util/bfloat16.h"

namespace combiner::ops {

void weight_cast_cpu(const WeightCast& w) {
  const int64_t *first = w.table + w.tensors, *numel = w.table + 2 * w.tensors;
  for (int64_t t = 0; t < w.tensors; ++t) {
    const auto* source =
        reinterpret_cast<const float*>(w.table[t]);  // NOLINT(performance-no-int-to-ptr)
    const int64_t end = t + 1 < w.tensors ? first[t + 1] : w.groups * kCastVector;
    for (int64_t i = 0; i < end - first[t]; ++i)
      w.out[first[t] + i] = i < numel[t] ? util::float_to_bf16(source[i]) : uint16_t{0};
  }
}

}  // namespace combiner::ops
