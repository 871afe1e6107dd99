// The CPU model of the LayerNorm kernels (ops/layer_norm_kernel.h): each warp's row in plain
// loops with the kernels' formulas, and the backward's partial sums in the kernels' parts, added
// in the kernels' order (a part's warps in order; then 32 slices of the parts, then the slices),
// so that what the tests prove here is what the GPU computes. The order of a row's own sums
// (the warp's shuffles) is not modelled: float32 sums of at most 1024 terms.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/cpu_values.h"
#include "ops/layer_norm_kernel.h"

namespace combiner::ops {

namespace {

void check_width(int64_t width) {
  if (!norm_width_supported(width))
    throw std::invalid_argument("layer norm kernels: width must be a multiple of 32 up to " +
                                std::to_string(kNormMaxWidth) + ", got " + std::to_string(width));
}

}  // namespace

void norm_forward_cpu(const NormForward& f) {
  check_width(f.width);
  const int64_t W = f.width;
  std::vector<float> row(static_cast<size_t>(W));
  for (int64_t r = 0; r < f.rows; ++r) {
    const float* x = f.x + r * W;
    if (f.residual) {  // the row is x + residual, kept as the sum
      for (int64_t c = 0; c < W; ++c) {
        row[c] = x[c] + load_value(f.residual, f.residual_dtype, r * W + c);
        f.sum[r * W + c] = row[c];
      }
      x = row.data();
    }
    float sum = 0.f;
    for (int64_t c = 0; c < W; ++c) sum += x[c];
    const float mean = sum / float(W);
    float var = 0.f;
    for (int64_t c = 0; c < W; ++c) var += (x[c] - mean) * (x[c] - mean);
    const float rstd = 1.f / std::sqrt(var / float(W) + f.eps);
    for (int64_t c = 0; c < W; ++c)
      store_value(f.y, f.y_dtype, r * W + c, (x[c] - mean) * rstd * f.weight[c] + f.bias[c]);
    f.mean[r] = mean;
    f.rstd[r] = rstd;
  }
}

void norm_backward_cpu(const NormBackward& b) {
  check_width(b.width);
  const int64_t W = b.width, P = b.parts;
  // Each warp's running dweight, dbias (as its lanes hold them), per part and warp.
  std::vector<float> warp_sums(size_t(P * kNormWarps * 2 * W), 0.f);
  std::vector<float> g(static_cast<size_t>(W)), xh(static_cast<size_t>(W));
  for (int64_t r = 0; r < b.rows; ++r) {
    const float* x = b.x + r * W;
    const float mean = b.mean[r], rstd = b.rstd[r];
    float sum_g = 0.f, sum_gx = 0.f;
    const int64_t part = norm_part_of_row(r, P), warp = r % kNormWarps;
    float* dw = warp_sums.data() + (part * kNormWarps + warp) * 2 * W;
    float* db = dw + W;
    for (int64_t c = 0; c < W; ++c) {
      const float d = load_value(b.dy, b.dy_dtype, r * W + c);
      xh[c] = (x[c] - mean) * rstd;
      g[c] = d * b.weight[c];
      sum_g += g[c];
      sum_gx += g[c] * xh[c];
      dw[c] += d * xh[c];
      db[c] += d;
    }
    const float a = sum_g * (1.f / float(W)), bx = sum_gx * (1.f / float(W));
    for (int64_t c = 0; c < W; ++c) {
      const float d = rstd * (g[c] - a - xh[c] * bx) + (b.d_sum ? b.d_sum[r * W + c] : 0.f);
      b.dx[r * W + c] = d;
      if (b.d_residual) store_value(b.d_residual, b.residual_dtype, r * W + c, d);
    }
  }
  for (int64_t p = 0; p < P; ++p)
    for (int64_t i = 0; i < 2 * W; ++i) {
      float s = 0.f;
      for (int64_t w = 0; w < kNormWarps; ++w)
        s += warp_sums[size_t((p * kNormWarps + w) * 2 * W + i)];
      b.partial[p * 2 * W + i] = s;
    }
  // As the reducing CTA: 32 slices of the parts (slice y: parts y, y + 32, ...), then the slices.
  for (int64_t i = 0; i < 2 * W; ++i) {
    float total = 0.f;
    for (int64_t y = 0; y < 32; ++y) {
      float s = 0.f;
      for (int64_t p = y; p < P; p += 32) s += b.partial[p * 2 * W + i];
      total += s;
    }
    (i < W ? b.dweight[i] : b.dbias[i - W]) = total;
  }
}

}  // namespace combiner::ops
