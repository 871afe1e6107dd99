// The CPU model of the bias-gradient kernels (ops/bias_grad_kernel.h): plain loops with the
// kernels' formulas and their order of addition (each warp's rows in order, a part's warps in
// order, then 32 slices of the parts and the slices in order), so that what the tests prove here
// is what the GPU computes.
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/bias_grad_kernel.h"
#include "ops/cpu_values.h"

namespace combiner::ops {

void bias_grad_cpu(const BiasGrad& g) {
  if (!bias_grad_supported(g.cols))
    throw std::invalid_argument("bias gradient kernels: the width must be a multiple of " +
                                std::to_string(kBiasVector) + ", got " + std::to_string(g.cols));
  const int64_t C = g.cols, P = g.parts;
  // Each warp's running sums, per part and warp.
  std::vector<float> warp_sums(size_t(P * kBiasWarps * C), 0.f);
  for (int64_t r = 0; r < g.rows; ++r) {
    const int64_t part = bias_grad_part_of_row(r, P), warp = r % kBiasWarps;
    float* acc = warp_sums.data() + (part * kBiasWarps + warp) * C;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t i = r * C + c;
      float d = load_value(g.dy, g.dtype, i);
      if (g.pre) d = store_value(g.d_pre, g.dtype, i, d * gelu_grad(load_value(g.pre, g.dtype, i)));
      acc[c] += d;
    }
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < C; ++c) {
      float s = 0.f;
      for (int64_t w = 0; w < kBiasWarps; ++w) s += warp_sums[size_t((p * kBiasWarps + w) * C + c)];
      g.partial[p * C + c] = s;
    }
  for (int64_t c = 0; c < C; ++c) {
    float total = 0.f;
    for (int64_t y = 0; y < 32; ++y) {
      float s = 0.f;
      for (int64_t p = y; p < P; p += 32) s += g.partial[p * C + c];
      total += s;
    }
    g.dbias[c] = total;
  }
}

}  // namespace combiner::ops
