// The CPU model of the decode kernel (decode_kernel.h): per (batch, head) the cache writes, then
// per plan the terms' rows through the kernel's own codes (decode_row_code, decode_row), their
// scores, max and sum, and the values' weighted sum kept per warp as the kernel's warps keep it
// (decode_warp_of) and added in warp order, in plain loops with the kernel's formulas
// (accumulating in the storage type: float32 or float64).
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
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, width = D + Dv;
  const int64_t pos = *s.position;
  std::vector<int> rows(static_cast<size_t>(decode_terms(s)));
  std::vector<T> scores(rows.size());
  std::vector<T> partial(static_cast<size_t>(kDecodeWarps * Dv));  // [warp, Dv]
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t bh = b * s.heads + h;
      auto vec = [&](const Operand& x) {
        return static_cast<const T*>(x.data) + b * x.batch + h * x.head;
      };
      const T *q = vec(s.q), *k = vec(s.k), *v = vec(s.v);
      T* kv_cache = static_cast<T*>(s.kv_cache) + bh * L * width;
      std::copy(k, k + D, kv_cache + pos * width);
      std::copy(v, v + Dv, kv_cache + pos * width + D);
      if (s.q_cache) std::copy(q, q + D, static_cast<T*>(s.q_cache) + (bh * L + pos) * D);

      T* out = static_cast<T*>(s.out) + bh * Dv;
      for (int p = 0; p < s.plans; ++p) {
        const DecodePlan& plan = s.plan[p];
        const int64_t n = plan.direct_count + plan.span_count;
        const T* spans = static_cast<const T*>(plan.spans) + bh * plan.span_rows * width;
        for (int64_t t = 0; t < n; ++t) rows[t] = decode_row_code(plan, t);
        auto row = [&](int64_t t) { return decode_row<T>(rows[t], kv_cache, spans, width); };

        T max = -std::numeric_limits<T>::max();
        for (int64_t t = 0; t < n; ++t) {
          const T* key = row(t);
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
        std::fill(partial.begin(), partial.end(), T(0));
        for (int64_t t = 0; t < n; ++t) {
          const T* value = row(t) + D;
          T* sum = partial.data() + decode_warp_of(t) * Dv;
          for (int64_t d = 0; d < Dv; ++d) sum[d] += scores[t] * value[d];
        }
        for (int64_t d = 0; d < Dv; ++d) {
          T o = 0;
          for (int w = 0; w < kDecodeWarps; ++w) o += partial[w * Dv + d];
          o /= total;
          out[d] = p == 0 ? o : out[d] + o;
        }
      }
      if (s.plans > 1)
        for (int64_t d = 0; d < Dv; ++d) out[d] /= T(s.plans);
    }
}

}  // namespace

void decode_step_cpu(const DecodeStep& s) {
  if (s.dtype == Dtype::kFloat32) return decode_step<float>(s);
  if (s.dtype == Dtype::kFloat64) return decode_step<double>(s);
  throw std::invalid_argument("decode step: the CPU model takes float32 or float64");
}

}  // namespace combiner::attention::fused
