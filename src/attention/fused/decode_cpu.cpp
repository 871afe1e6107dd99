// The CPU model of the decode kernel (decode_kernel.h): per (batch, head) the cache writes, then
// per plan the terms' rows through the kernel's own codes (decode_row_code, decode_row), their
// scores, max and sum, and the values' weighted sum kept per warp as the kernel's warps keep it
// (decode_warp_of) and added in warp order, in plain loops with the kernel's formulas
// (accumulating in the inputs' type, float32 or float64; caches of bfloat16 read into float32).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention/fused/decode_kernel.h"
#include "util/bfloat16.h"

namespace combiner::attention::fused {

namespace {

// A cache element: T itself, or bfloat16 (util/bfloat16.h: rounded to nearest even, as the
// kernel's __float2bfloat16).
using util::BFloat16;

// T: the inputs' and the arithmetic's type; C: the caches'.
template <typename T, typename C>
void decode_step(const DecodeStep& s) {
  const auto load = [](C x) { return util::to_math<C, T>(x); };
  const auto store = [](T x) { return util::to_storage<C, T>(x); };
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
      const T *q_in = vec(s.q), *k = vec(s.k), *v = vec(s.v);
      C* kv_cache = static_cast<C*>(s.kv_cache) + bh * L * width;
      std::transform(k, k + D, kv_cache + pos * width, store);
      std::transform(v, v + Dv, kv_cache + pos * width + D, store);
      // The step's own query as the cache holds it.
      std::vector<T> q(static_cast<size_t>(D));
      for (int64_t d = 0; d < D; ++d) q[d] = load(store(q_in[d]));
      if (s.q_cache)
        std::transform(q_in, q_in + D, static_cast<C*>(s.q_cache) + (bh * L + pos) * D, store);

      T* out = static_cast<T*>(s.out) + bh * Dv;
      for (int p = 0; p < s.plans; ++p) {
        const DecodePlan& plan = s.plan[p];
        const int64_t n = plan.direct_count + plan.span_count;
        const T* spans = static_cast<const T*>(plan.spans) + bh * plan.span_rows * width;
        for (int64_t t = 0; t < n; ++t) rows[t] = decode_row_code(plan, t);
        // Element i of term t's row.
        auto at = [&](int64_t t, int64_t i) {
          const auto row = decode_row(rows[t], kv_cache, spans, width);
          return row.cache ? load(row.cache[i]) : row.span[i];
        };

        T max = -std::numeric_limits<T>::max();
        for (int64_t t = 0; t < n; ++t) {
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[d] * at(t, d);
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
          T* sum = partial.data() + decode_warp_of(t) * Dv;
          for (int64_t d = 0; d < Dv; ++d) sum[d] += scores[t] * at(t, D + d);
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
  if (!decode_dtypes_supported(s))
    throw std::invalid_argument(
        "decode step: the CPU model takes float32 or float64, or float32 over bfloat16 caches");
  if (s.dtype == Dtype::kFloat64) return decode_step<double, double>(s);
  if (s.cache == Dtype::kBFloat16) return decode_step<float, BFloat16>(s);
  return decode_step<float, float>(s);
}

}  // namespace combiner::attention::fused
