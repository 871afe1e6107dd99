// The CPU model of the fused kernels (fused/kernel.h): the same tiles, in the same order, with
// the same formulas as kernel_*.cu, in plain loops, so that what the tests prove here is
// what the GPU runs. Where a CUDA warp works on 16 rows of a tile at once, this works row by row;
// the online-softmax rescaling, the log2-domain exponentials, the saved log-sum-exp and the
// backward's recomputation dS = P (dP - delta) are the kernels' own. Storage S is float, double
// or bfloat16; arithmetic T is S, or float32 for bfloat16 (operands read from bfloat16, stored
// outputs rounded to it; the CUDA kernels also round P and dS to bfloat16 for their tensor-core
// products, which this model does not).
#include "attention/fused/kernel_cpu.h"
#include "attention/fused/cpu_dispatch.h"
#include "attention/fused/kernel.h"

#include <cmath>
#include <limits>
#include <vector>

namespace combiner::attention::fused {

namespace cpu_model {

// A pooled pass's keys of its CTA's key tile of source A (pooled_key_tile), as the forward
// writes them: each key's running max down its segment, at its row of ks.
template <typename S, typename T>
void write_pooled_keys(const Forward& f, int64_t b, int64_t h, const KeyTile<T>& kt) {
  const Pass& p = f.pass;
  SegmentRows<S, T> keys(p.k, p.key, b, h, p.dim, true);
  for (const TileIndex& key : kt.key) {
    if (!key.valid) continue;
    const auto& pooled = keys.row(key.g, key.i);
    const int64_t row = row_of(p.pooled_keys, key.g, key.i);
    S* out = static_cast<S*>(f.pooled_keys) + b * f.pooled_keys_stride[0] +
             h * f.pooled_keys_stride[1] + row * f.pooled_keys_stride[2];
    for (int64_t d = 0; d < p.dim; ++d) out[d] = to_storage<S>(pooled[d]);
  }
}

// One query tile: online softmax over the key tiles, then the epilogue (store or merge).
template <typename S, typename T>
void forward_tile(const Forward& f, int64_t b, int64_t h, int64_t cta) {
  const Pass& p = f.pass;
  std::vector<TileIndex> qs;
  if (!query_rows(p, cta, qs)) return;
  const QueryTileKeys n = query_tile_keys(p, cta);
  const int64_t D = p.dim, M = kQueryTile;
  const T scale2 = T(p.scale * kLog2e), inf = std::numeric_limits<T>::infinity();
  std::vector<T> m(M, -inf), l(M, 0), acc(M * D, 0), s(kKeyTile);
  for (int64_t tile = 0; tile < n.total; ++tile) {
    const auto kt = key_tile<S, T>(p, b, h, cta, tile, n.direct);
    if (f.pooled_keys && tile == pooled_key_tile(p, cta)) write_pooled_keys<S, T>(f, b, h, kt);
    auto queries = query_rows_of<S, T>(p, b, h);
    for (int64_t r = 0; r < M; ++r) {
      if (!qs[r].valid) continue;
      const auto& q = queries.row(qs[r].g, qs[r].i);
      T top = -inf;
      for (int64_t c = 0; c < kKeyTile; ++c) {
        s[c] = allowed(p, kt, c, qs[r]) ? dot(q.data(), &kt.k[c * D], D) * scale2 : -inf;
        top = std::max(top, s[c]);
      }
      const T m_new = std::max(m[r], top), m_use = m_new == -inf ? T(0) : m_new;
      const T alpha = std::exp2(m[r] - m_use);
      T* o = acc.data() + r * D;
      for (int64_t d = 0; d < D; ++d) o[d] *= alpha;
      l[r] *= alpha;
      for (int64_t c = 0; c < kKeyTile; ++c) {
        const T w = std::exp2(s[c] - m_use);
        if (w == 0) continue;
        l[r] += w;
        for (int64_t d = 0; d < D; ++d) o[d] += w * kt.v[c * D + d];
      }
      m[r] = m_new;
    }
  }
  const int64_t rows = p.query.limit;
  for (int64_t r = 0; r < M; ++r) {
    if (!qs[r].valid) continue;
    const int64_t row = row_of(p.query, qs[r].g, qs[r].i), at = (b * p.heads + h) * rows + row;
    S* o_out = static_cast<S*>(f.o) + output_at(f, b, h, row);
    T* lse = static_cast<T*>(f.lse) + at;
    const T lse2 = l[r] > 0 ? m[r] + std::log2(l[r]) : -inf;
    const T inv = l[r] > 0 ? T(1) / l[r] : T(0);
    // Element d of the row's result y stored: y, or its mean with mean_with's (Forward::mean_with).
    const S* with =
        f.mean_with ? static_cast<const S*>(f.mean_with) + output_at(f, b, h, row) : nullptr;
    const auto store = [&](int64_t d, T y) {
      o_out[d] = to_storage<S>(with ? T(0.5) * (y + to_math<S, T>(with[d])) : y);
    };
    if (!f.merge) {
      for (int64_t d = 0; d < D; ++d) store(d, acc[r * D + d] * inv);
      *lse = lse2 * T(kLn2);
    } else if (l[r] > 0) {  // log-sum-exp of the two passes; rows without terms keep theirs
      const T prev2 = *lse * T(kLog2e), top = std::max(prev2, lse2);
      const T total2 = top + std::log2(std::exp2(prev2 - top) + std::exp2(lse2 - top));
      const T w_prev = std::exp2(prev2 - total2), w_new = std::exp2(lse2 - total2) * inv;
      for (int64_t d = 0; d < D; ++d)
        store(d, w_prev * to_math<S, T>(o_out[d]) + w_new * acc[r * D + d]);
      *lse = total2 * T(kLn2);
    } else if (with) {
      for (int64_t d = 0; d < D; ++d) store(d, to_math<S, T>(o_out[d]));
    }
  }
}

template <typename S, typename T>
void forward_all(const Forward& f) {
  const Pass& p = f.pass;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h)
      for (int64_t cta = 0; cta < query_ctas(p); ++cta) forward_tile<S, T>(f, b, h, cta);
}

template <typename S, typename T>
void delta_all(const Delta& d) {
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t h = 0; h < d.heads; ++h)
      for (int64_t r = 0; r < d.rows; ++r)
        static_cast<T*>(d.delta)[(b * d.heads + h) * d.rows + r] =
            own_delta(row_delta<S, T>(d.o, d.d_o, b, h, r, d.dim),
                      d.other_delta,
                      (b * d.heads + h) * d.rows + r);
}

}  // namespace cpu_model

void forward_cpu(const Forward& f) {
  // The CTAs' queries made from their rows of x before they read them (Forward::query_pool): the
  // segment max kernel's values.
  if (f.query_pool.segments > 0) segment_max_forward_cpu(one_part(f.query_pool));
  cpu_model::dispatch(f.pass.dtype,
                      [&](auto s, auto t) { cpu_model::forward_all<decltype(s), decltype(t)>(f); });
  if (f.delta.delta) delta_cpu(f.delta);  // its own CTAs, reading nothing the pass writes
  // Each CTA's segment from its key tile: what the pass writes, no pass reads.
  if (f.key_pool.segments > 0) segment_max_forward_cpu(one_part(f.key_pool));
}

// The two passes write different tensors and read neither's outputs (pairable, and the
// caller): one after the other computes what each CTA running both in turn does.
void forward_pair_cpu(const ForwardPair& pair) {
  forward_cpu(pair.first);
  forward_cpu(pair.second);
}

void delta_cpu(const Delta& d) {
  cpu_model::dispatch(d.dtype,
                      [&](auto s, auto t) { cpu_model::delta_all<decltype(s), decltype(t)>(d); });
}

}  // namespace combiner::attention::fused
