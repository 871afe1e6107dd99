// The CPU model of the span-summary kernel (decode_summary.h): per span and (batch, head) the
// listed positions through the kernel's own rule (summary_position), the pooled key and query,
// the scores, their max and sum, and the values' weighted sum, in plain loops with the kernel's
// formulas (accumulating in the table's type, float32 or float64; caches of bfloat16 read into
// float32).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "attention/fused/decode_summary.h"
#include "util/bfloat16.h"

namespace combiner::attention::fused {

namespace {

using util::BFloat16;

// T: the table's and the arithmetic's type; C: the caches'.
template <typename T, typename C>
void summaries(const DecodeSummaries& s) {
  const auto load = [](C x) { return util::to_math<C, T>(x); };
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, width = D + Dv, n = s.span_len;
  std::vector<int64_t> rows(static_cast<size_t>(n));
  std::vector<T> key(static_cast<size_t>(D)), query(static_cast<size_t>(D)),
      scores(static_cast<size_t>(n));
  for (int64_t g = 0; g < s.spans; ++g)
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
      const C* kv = static_cast<const C*>(s.kv_cache) + bh * L * width;
      const C* qc = s.q_cache ? static_cast<const C*>(s.q_cache) + bh * L * D : nullptr;
      int64_t count = 0;
      for (int64_t j = 0; j < n; ++j) {
        rows[j] = summary_position(s, g, j);
        count += rows[j] >= 0;
      }
      // The pools, element by element over the valid positions in order.
      auto pool = [&](const C* x, int64_t stride, int64_t d) {
        T acc = s.max ? -std::numeric_limits<T>::infinity() : T(0);
        for (int64_t j = 0; j < n; ++j) {
          if (rows[j] < 0) continue;
          const T e = load(x[rows[j] * stride + d]);
          acc = s.max ? std::max(acc, e) : acc + e;
        }
        return s.max ? acc : acc / T(count);
      };
      for (int64_t d = 0; d < D; ++d) {
        key[d] = pool(kv, width, d);
        query[d] = s.queries ? load(qc[s.queries[g] * D + d]) : pool(qc, D, d);
      }
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        T dot = 0;
        if (rows[j] >= 0)
          for (int64_t d = 0; d < D; ++d) dot += query[d] * load(kv[rows[j] * width + d]);
        scores[j] = rows[j] >= 0 ? dot * T(s.scale) : -std::numeric_limits<T>::infinity();
        max = std::max(max, scores[j]);
      }
      T total = 0;
      for (int64_t j = 0; j < n; ++j) {
        scores[j] = rows[j] >= 0 ? std::exp(scores[j] - max) : T(0);
        total += scores[j];
      }
      T* row = static_cast<T*>(s.table) + (bh * s.table_rows + s.slots[g]) * width;
      std::copy(key.begin(), key.end(), row);
      for (int64_t d = 0; d < Dv; ++d) {
        T sum = 0;
        for (int64_t j = 0; j < n; ++j)
          if (rows[j] >= 0) sum += scores[j] * load(kv[rows[j] * width + D + d]);
        row[D + d] = sum / total;
      }
    }
}

}  // namespace

void decode_summaries_cpu(const DecodeSummaries& s) {
  if (!summary_dtypes_supported(s))
    throw std::invalid_argument(
        "span summaries: the CPU model takes float32 or float64, or float32 over bfloat16 caches");
  if (s.dtype == Dtype::kFloat64) return summaries<double, double>(s);
  if (s.cache == Dtype::kBFloat16) return summaries<float, BFloat16>(s);
  return summaries<float, float>(s);
}

}  // namespace combiner::attention::fused
