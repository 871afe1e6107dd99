// The CPU model of the decode kernel (decode_kernel.h): per (batch, head) the cache writes, then
// per plan the scores, their max and sum, and the weighted sum of the values, in plain loops with
// the kernel's formulas (accumulating in the storage type: float32 or float64).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention/fused/decode_kernel.h"

namespace combiner::attention::fused {

namespace {

template <typename T>
void decode_step(const DecodeStep& s) {
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, row = D + Dv;
  const int64_t pos = *s.position;
  auto* q_cache = static_cast<T*>(s.q_cache);
  auto* kv_cache = static_cast<T*>(s.kv_cache);
  auto* out = static_cast<T*>(s.out);
  std::vector<T> scores(static_cast<size_t>(decode_terms(s)));
  std::vector<T> sum(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = b * s.heads + h;
      auto vec = [&](const Operand& x) {
        return static_cast<const T*>(x.data) + b * x.batch + h * x.head;
      };
      const T *q = vec(s.q), *k = vec(s.k), *v = vec(s.v);
      T* kv_row = kv_cache + (bh * L + pos) * row;
      std::copy(k, k + D, kv_row);
      std::copy(v, v + Dv, kv_row + D);
      if (q_cache) std::copy(q, q + D, q_cache + (bh * L + pos) * D);

      T* o = out + bh * Dv;
      std::fill(o, o + Dv, T(0));
      for (int p = 0; p < s.plans; ++p) {
        const DecodePlan& plan = s.plan[p];
        const int64_t n = plan.direct_count + plan.span_count;
        auto term = [&](int64_t t) -> const T* {
          if (t < plan.direct_count) return kv_cache + (bh * L + plan.direct[t]) * row;
          return static_cast<const T*>(plan.spans) +
                 (bh * plan.span_rows + plan.slots[t - plan.direct_count]) * row;
        };
        T max = -std::numeric_limits<T>::infinity();
        for (int64_t t = 0; t < n; ++t) {
          const T* key = term(t);
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * key[d];
          scores[t] = dot * T(s.scale) + T(plan.bias[t]);
          max = std::max(max, scores[t]);
        }
        T total = 0;
        for (int64_t t = 0; t < n; ++t) {
          scores[t] = std::exp(scores[t] - max);
          total += scores[t];
        }
        std::fill(sum.begin(), sum.end(), T(0));
        for (int64_t t = 0; t < n; ++t) {
          const T* value = term(t) + D;
          for (int64_t d = 0; d < Dv; ++d) sum[d] += scores[t] * value[d];
        }
        for (int64_t d = 0; d < Dv; ++d) o[d] += sum[d] / total;
      }
      if (s.plans > 1)
        for (int64_t d = 0; d < Dv; ++d) o[d] /= T(s.plans);
    }
}

}  // namespace

void decode_step_cpu(const DecodeStep& s) {
  if (s.dtype == Dtype::kFloat32) return decode_step<float>(s);
  if (s.dtype == Dtype::kFloat64) return decode_step<double>(s);
  throw std::invalid_argument("decode step: the CPU model takes float32 or float64");
}

}  // namespace combiner::attention::fused
