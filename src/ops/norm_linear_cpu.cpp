// The CPU model of the LayerNorm-and-linear kernel (ops/norm_linear_kernel.h): each row's add and
// LayerNorm with the LayerNorm kernels' formulas, then each output's dot product over the width
// in the kernel's order (chunk by chunk, column by column within a chunk: the same as in order),
// the bias and the activation, in plain loops.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/norm_linear_kernel.h"

namespace combiner::ops {

void norm_linear_cpu(const NormLinear& n) {
  if (!norm_linear_supported(n.width))
    throw std::invalid_argument("norm-linear kernel: width must be a multiple of 32 up to " +
                                std::to_string(kNormMaxWidth) + ", got " + std::to_string(n.width));
  const int64_t W = n.width;
  std::vector<float> s(static_cast<size_t>(W)), xn(static_cast<size_t>(W));
  for (int64_t r = 0; r < n.rows; ++r) {
    for (int64_t c = 0; c < W; ++c) {
      s[c] = n.x[r * W + c];
      if (n.residual) {
        s[c] += n.residual[r * W + c];
        n.sum[r * W + c] = s[c];
      }
    }
    float total = 0.f;
    for (int64_t c = 0; c < W; ++c) total += s[c];
    const float mean = total / float(W);
    float var = 0.f;
    for (int64_t c = 0; c < W; ++c) var += (s[c] - mean) * (s[c] - mean);
    const float rstd = 1.f / std::sqrt(var / float(W) + n.eps);
    for (int64_t c = 0; c < W; ++c)
      xn[c] = (s[c] - mean) * rstd * n.norm_weight[c] + n.norm_bias[c];
    for (int64_t o = 0; o < n.out; ++o) {
      const float* w = n.weight + o * W;
      float acc = 0.f;
      for (int64_t c = 0; c < W; ++c) acc += xn[c] * w[c];
      if (n.bias) acc += n.bias[o];
      if (n.gelu) acc = 0.5f * acc * (1.f + std::erf(acc * float(M_SQRT1_2)));
      n.y[r * n.out + o] = acc;
    }
  }
}

}  // namespace combiner::ops
