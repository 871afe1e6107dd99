// The CPU model of the loss kernels (ops/cross_entropy_kernel.h): each warp's row in plain loops
// with the kernels' formulas and their order of addition, each lane's columns in order and then
// the warp's butterfly, so that the emulated CUDA source gives these bits exactly.
#include <array>
#include <cmath>
#include <limits>

#include "ops/cpu_values.h"
#include "ops/cross_entropy_kernel.h"

namespace combiner::ops {

namespace {

constexpr int kLanes = 32;

// The sum every lane holds after the butterfly: lane l adds lane l ^ o's value, o = 16 .. 1.
float warp_sum(std::array<float, kLanes> v) {
  for (int o = kLanes / 2; o > 0; o /= 2) {
    std::array<float, kLanes> next{};
    for (int l = 0; l < kLanes; ++l) next[l] = v[l] + v[l ^ o];
    v = next;
  }
  return v[0];
}

// Row r's max and the log of its exponentials' sum, as the forward kernel makes them.
struct RowSums {
  float m, log_s;
};
RowSums row_sums(const void* z, Dtype dtype, int64_t r, int64_t vocab) {
  const int64_t row = r * vocab;
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < vocab; ++c) m = std::fmax(m, load_value(z, dtype, row + c));
  std::array<float, kLanes> sums{};
  for (int l = 0; l < kLanes; ++l)
    for (int64_t c = l; c < vocab; c += kLanes)
      sums[l] += std::exp(load_value(z, dtype, row + c) - m);
  return {m, std::log(warp_sum(sums))};
}

}  // namespace

void entropy_forward_cpu(const EntropyForward& f) {
  for (int64_t r = 0; r < f.rows; ++r) {
    const auto [m, log_s] = row_sums(f.logits, f.dtype, r, f.vocab);
    const int64_t t = entropy_target(f.targets, f.target_type, r, f.vocab);
    f.lse[r] = m + log_s;
    f.bits[r] = t < 0 ? std::numeric_limits<float>::quiet_NaN()
                      : ((m - load_value(f.logits, f.dtype, r * f.vocab + t)) + log_s) * kLog2e;
  }
}

void entropy_backward_cpu(const EntropyBackward& b) {
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t t = entropy_target(b.targets, b.target_type, r, b.vocab);
    const float g = t < 0 ? std::numeric_limits<float>::quiet_NaN()
                          : b.grad[r * b.grad_stride] * b.grad_scale * kLog2e;
    const float lse = b.lse[r];
    for (int64_t c = 0; c < b.vocab; ++c) {
      const int64_t i = r * b.vocab + c;
      const float p = std::exp(load_value(b.logits, b.dtype, i) - lse);
      store_value(b.dlogits, b.dtype, i, g * (c == t ? p - 1.f : p));
    }
  }
}

}  // namespace combiner::ops
