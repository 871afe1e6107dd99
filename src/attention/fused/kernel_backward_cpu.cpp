// The CPU model of the fused backward (kernel_backward.cu, kernel_dkv.cuh): the dq tile, the
// dk/dv walk of a CTA's keys, a pooled pass's pools' backward in its epilogue and the deltas a
// pass makes itself, in the kernels' order (kernel_cpu.cpp says how the model stands to them).
#include "attention/fused/cpu_dispatch.h"
#include "attention/fused/kernel.h"
#include "attention/fused/kernel_cpu.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

namespace combiner::attention::fused {

namespace cpu_model {

// A pooled pass's pools' backward (Backward::pools_dq), in its segment CTA's epilogue: the tile's
// query gradient `dq` (rows as `qs`, scaled), rounded to S as dq would be stored, through the
// running max of q into pools_dq; d_pooled_keys through the running max of k into dk (already
// holding this pass's part).
template <typename S, typename T>
void pools_backward_tile(const Backward& bw,
                         int64_t b,
                         int64_t h,
                         const std::vector<TileIndex>& qs,
                         const std::vector<T>& dq) {
  const Pass& p = bw.pass;
  const int64_t D = p.dim;
  const auto element = [&](const GradOut& out, int64_t row, int64_t d) -> S& {
    return static_cast<S*>(out.data)[grad_at(out, b, h, row) + d];
  };
  const auto at = [&](const Operand& x, int64_t row, int64_t d) {
    return to_math<S, T>(static_cast<const S*>(x.data)[b * x.batch + h * x.head + row * x.row + d]);
  };
  std::vector<int64_t> segments, tile_row(kQueryTile * kQueryTile, -1);
  for (int64_t r = 0; r < int64_t(qs.size()); ++r) {
    if (!qs[r].valid) continue;
    if (segments.empty() || segments.back() != qs[r].g) segments.push_back(qs[r].g);
    tile_row[(segments.size() - 1) * kQueryTile + qs[r].i] = r;
  }
  for (size_t s = 0; s < segments.size(); ++s) {
    const int64_t g = segments[s];
    for (int64_t d = 0; d < D; ++d) {
      running_max_backward_line<T>(
          valid_count(p.query, g),
          [&](int64_t t) { return at(p.q, row_of(p.pooled_query, g, t), d); },
          [&](int64_t t) {
            return to_math<S, T>(to_storage<S>(dq[tile_row[s * kQueryTile + t] * D + d]));
          },
          [&](int64_t t, T sum) {
            S& e = element(bw.pools_dq, row_of(p.pooled_query, g, t), d);
            e = to_storage<S>(to_math<S, T>(e) + sum);
          },
          [](int64_t) {});
      running_max_backward_line<T>(
          valid_count(p.key, g),
          [&](int64_t j) { return at(p.k, row_of(p.key, g, j), d); },
          [&](int64_t j) { return at(bw.d_pooled_keys, row_of(p.pooled_keys, g, j), d); },
          [&](int64_t j, T sum) {
            S& e = element(bw.dk, row_of(p.key, g, j), d);
            e = to_storage<S>(to_math<S, T>(e) + sum);
          },
          [](int64_t) {});
    }
  }
}

// dQ of one query tile: P from the saved lse, dP = dO V^T, dS = P (dP - delta), dQ += dS K.
template <typename S, typename T>
void backward_dq_tile(const Backward& bw, int64_t b, int64_t h, int64_t cta) {
  const Pass& p = bw.pass;
  std::vector<TileIndex> qs;
  if (!query_rows(p, cta, qs)) return;
  const QueryTileKeys n = query_tile_keys(p, cta);
  const int64_t D = p.dim, M = kQueryTile, rows = p.query.limit;
  const T scale2 = T(p.scale * kLog2e);
  std::vector<T> dq(M * D, 0);
  for (int64_t tile = 0; tile < n.total; ++tile) {
    const auto kt = key_tile<S, T>(p, b, h, cta, tile, n.direct);
    auto queries = query_rows_of<S, T>(p, b, h);
    for (int64_t r = 0; r < M; ++r) {
      if (!qs[r].valid) continue;
      const int64_t row = row_of(p.query, qs[r].g, qs[r].i), at = (b * p.heads + h) * rows + row;
      const auto& q = queries.row(qs[r].g, qs[r].i);
      const auto d_o = row_of_head<S, T>(bw.d_o, b, h, row, D);
      const T lse2 = static_cast<const T*>(bw.lse)[at] * T(kLog2e);
      const T delta = static_cast<const T*>(bw.delta)[at];
      for (int64_t c = 0; c < kKeyTile; ++c) {
        if (!allowed(p, kt, c, qs[r])) continue;
        const T w = std::exp2(dot(q.data(), &kt.k[c * D], D) * scale2 - lse2);
        const T ds = w * (dot(d_o.data(), &kt.v[c * D], D) - delta);
        for (int64_t d = 0; d < D; ++d) dq[r * D + d] += ds * kt.k[c * D + d];
      }
    }
  }
  for (auto& x : dq) x *= T(p.scale * bw.grad_scale);
  if (bw.pools_dq.kind != GradOut::kNone) return pools_backward_tile<S, T>(bw, b, h, qs, dq);
  for (int64_t r = 0; r < M; ++r)
    if (qs[r].valid) write_grad<S>(bw.dq, p, b, h, row_of(p.query, qs[r].g, qs[r].i), &dq[r * D]);
}

// dK, dV of dk/dv CTA `cta` of `keys` (fused/kernel_index.h dkv_column; by prefix, summary tile
// `cta` against the queries of part `part`), walking the query tiles that can see its keys
// (dkv_queries): P^T, dP^T and dS^T per (key, query), summed over queries.
template <typename S, typename T>
void backward_dkv_tile(
    const Backward& bw, int64_t b, int64_t h, Keys keys, int64_t cta, int64_t part) {
  const Pass& p = bw.pass;
  const bool a = keys == Keys::kSourceA, prefix = keys == Keys::kPrefixSummaries;
  const int64_t D = p.dim, MQ = backward_query_tile(D), rows = p.query.limit;
  const Mask mask = a ? p.mask : p.summary_mask;
  KeyTile<T> kt;
  kt.summary = !a;
  for (int64_t c = 0; c < kKeyTile; ++c) kt.key.push_back(dkv_column(p, keys, cta, c));
  if (std::none_of(kt.key.begin(), kt.key.end(), [](const TileIndex& k) { return k.valid; }))
    return;  // no key: no gradient to write
  const QueryRange f = dkv_queries(p, keys, kt.key[0], part);
  if (prefix && f.end <= f.begin) return;  // atomic outputs: nothing to add
  load_key_rows<S>(p, b, h, kt);
  const T scale2 = T(p.scale * kLog2e);
  std::vector<T> dk(kKeyTile * D, 0), dv(kKeyTile * D, 0);
  auto queries = query_rows_of<S, T>(p, b, h);
  for (int64_t f0 = f.begin; f0 < f.end; f0 += MQ) {
    for (int64_t i = 0; i < MQ && f0 + i < f.end; ++i) {
      const TileIndex qr = dkv_query(p, keys, cta, kt.key[0], f0 + i);
      if (!qr.valid) continue;
      const int64_t row = row_of(p.query, qr.g, qr.i), at = (b * p.heads + h) * rows + row;
      const auto& q = queries.row(qr.g, qr.i);
      const auto d_o = row_of_head<S, T>(bw.d_o, b, h, row, D);
      const T lse2 = static_cast<const T*>(bw.lse)[at] * T(kLog2e);
      const T delta = static_cast<const T*>(bw.delta)[at];
      for (int64_t c = 0; c < kKeyTile; ++c) {
        const TileIndex& key = kt.key[c];
        const bool seen = key.valid && (prefix ? key.i < summary_terms(p, qr.g)
                                               : key.g == qr.g && mask_allows(mask, qr.i, key.i));
        if (!seen) continue;
        const T w = std::exp2(dot(&kt.k[c * D], q.data(), D) * scale2 - lse2);
        const T ds = w * (dot(&kt.v[c * D], d_o.data(), D) - delta);
        for (int64_t d = 0; d < D; ++d) {
          dv[c * D + d] += w * d_o[d];
          dk[c * D + d] += ds * q[d];
        }
      }
    }
  }
  for (auto& x : dk) x *= T(p.scale * bw.grad_scale);
  for (auto& x : dv) x *= T(bw.grad_scale);
  for (int64_t c = 0; c < kKeyTile; ++c) {
    const TileIndex& key = kt.key[c];
    if (!key.valid) continue;
    const int64_t k_row = key_row_of(p, !a, key.g, key.i);
    const int64_t v_row = value_row_of(p, !a, key.g, key.i);
    if (a) {
      write_grad<S>(bw.dk, p, b, h, k_row + key.g * bw.dk.segment_rows, &dk[c * D]);
      write_grad<S>(bw.dv, p, b, h, v_row + key.g * bw.dv.segment_rows, &dv[c * D]);
    } else {
      write_grad<S>(bw.dks, p, b, h, k_row, &dk[c * D]);
      write_grad<S>(bw.du, p, b, h, v_row, &dv[c * D]);
    }
    if (bw.summary_delta && bw.summary_delta_of_a == a && !prefix) {  // u . du as stored
      const GradOut& du = a ? bw.dv : bw.du;
      const Operand stored{du.data, du.stride[0], du.stride[1], du.stride[2]};
      static_cast<T*>(bw.summary_delta)[(b * p.heads + h) * bw.summary_delta_rows + v_row] =
          row_delta<S, T>(a ? p.v : p.u, stored, b, h, v_row, D);
    }
  }
}

// Backward::made_delta: the delta of query CTA `cta`'s rows, delta_all's.
template <typename S, typename T>
void make_delta_tile(const Backward& bw, int64_t b, int64_t h, int64_t cta) {
  const Pass& p = bw.pass;
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const TileIndex q = tile_query(p, cta, r);
    if (!q.valid) continue;
    const int64_t row = row_of(p.query, q.g, q.i), at = (b * p.heads + h) * p.query.limit + row;
    static_cast<T*>(bw.made_delta)[at] =
        own_delta(row_delta<S, T>(bw.o, bw.d_o, b, h, row, p.dim), bw.other_delta, at);
  }
}

// One CTA of a segment_backward pass (kernel_backward.cu segment_backward_cta): its keys of
// source A, then of source B, then its queries' dq, which may overwrite d_o rows that only this
// segment reads.
template <typename S, typename T>
void segment_cta(const Backward& bw, int64_t b, int64_t h, int64_t cta) {
  if (bw.made_delta) make_delta_tile<S, T>(bw, b, h, cta);
  backward_dkv_tile<S, T>(bw, b, h, Keys::kSourceA, cta, 0);
  if (bw.pass.summaries) backward_dkv_tile<S, T>(bw, b, h, Keys::kSegmentSummaries, cta, 0);
  backward_dq_tile<S, T>(bw, b, h, cta);
}

// The summaries' dk/dv walk by prefix: a CTA per (summary tile, part).
template <typename S, typename T>
void summary_walk(const Backward& bw, int64_t b, int64_t h) {
  const Pass& p = bw.pass;
  const int64_t parts = ceil_div(p.query.segments, segments_per_part(p));
  for (int64_t st = 0; st < ceil_div(p.summary_count, kKeyTile); ++st)
    for (int64_t part = 0; part < parts; ++part)
      backward_dkv_tile<S, T>(bw, b, h, Keys::kPrefixSummaries, st, part);
}

template <typename S, typename T>
void backward_all(const Backward& bw) {
  const Pass& p = bw.pass;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      if (segment_backward(p)) {
        for (int64_t cta = 0; cta < query_ctas(p); ++cta) segment_cta<S, T>(bw, b, h, cta);
        continue;
      }
      if (interleaved_backward(bw)) {  // one launch on a GPU, its CTAs in that order
        for (int64_t x = 0; x < interleaved_ctas(p); ++x) {
          const BackwardCta c = interleaved_cta(p, x);
          if (c.dq)
            backward_dq_tile<S, T>(bw, b, h, c.cta);
          else
            backward_dkv_tile<S, T>(bw, b, h, c.keys, c.cta, 0);
        }
        if (prefix_summaries(p)) summary_walk<S, T>(bw, b, h);
        continue;
      }
      // dk, dv first, as the kernels: dq may overwrite d_o in place (Backward in kernel_pass.h).
      // One launch on a GPU: source A's key tiles, then source B's by segment. Where the walk
      // makes o's delta (walk_makes_delta), the launches after it read its rows: the same
      // values, made here first.
      if (bw.made_delta)
        for (int64_t cta = 0; cta < query_ctas(p); ++cta) make_delta_tile<S, T>(bw, b, h, cta);
      for (int64_t cta = 0; cta < key_ctas(p, false); ++cta)
        backward_dkv_tile<S, T>(bw, b, h, Keys::kSourceA, cta, 0);
      if (p.summaries && p.by_segment) {
        for (int64_t cta = 0; cta < key_ctas(p, true); ++cta)
          backward_dkv_tile<S, T>(bw, b, h, Keys::kSegmentSummaries, cta, 0);
      } else if (p.summaries) {
        summary_walk<S, T>(bw, b, h);
      }
      for (int64_t cta = 0; cta < query_ctas(p); ++cta) backward_dq_tile<S, T>(bw, b, h, cta);
    }
}

// Two passes in one launch (BackwardPair): each CTA the first's, then the second's; two walks
// (walks_pairable) in two such launches, the dk/dv walks', then dq's.
template <typename S, typename T>
void backward_pair_all(const BackwardPair& pair) {
  const Pass &p = pair.first.pass, &r = pair.second.pass;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      if (segment_backward(p)) {
        for (int64_t cta = 0; cta < query_ctas(p); ++cta) {
          segment_cta<S, T>(pair.first, b, h, cta);
          if (cta < query_ctas(r)) segment_cta<S, T>(pair.second, b, h, cta);
        }
        continue;
      }
      for (int64_t cta = 0; cta < key_ctas(p, false); ++cta) {
        backward_dkv_tile<S, T>(pair.first, b, h, Keys::kSourceA, cta, 0);
        if (cta < key_ctas(r, false))
          backward_dkv_tile<S, T>(pair.second, b, h, Keys::kSourceA, cta, 0);
      }
      for (int64_t cta = 0; cta < query_ctas(p); ++cta) {
        backward_dq_tile<S, T>(pair.first, b, h, cta);
        if (cta < query_ctas(r)) backward_dq_tile<S, T>(pair.second, b, h, cta);
      }
    }
}

}  // namespace cpu_model

// A key pool's backward adds into rows of dk after the CTA that stores them (the segment's, or
// in a walk the key tile's) has, and no other CTA touches them; a query pool's adds into rows of
// the pooled q's gradient, which the pass does not write, after the CTA of the segment's query
// has stored that query's gradient, its dy: after the whole pass, the same sums.
void backward_cpu(const Backward& b) {
  if (b.made_delta && !makes_delta_built(b.pass))
    throw std::runtime_error("fused backward: o's delta asked of a pass that cannot make it");
  cpu_model::dispatch(
      b.pass.dtype, [&](auto s, auto t) { cpu_model::backward_all<decltype(s), decltype(t)>(b); });
  if (b.key_pool.segments > 0) segment_max_backward_cpu(one_part(b.key_pool));
  if (b.query_pool.segments > 0) segment_max_backward_cpu(one_part(b.query_pool));
}

void backward_pair_cpu(const BackwardPair& pair) {
  cpu_model::dispatch(pair.first.pass.dtype, [&](auto s, auto t) {
    cpu_model::backward_pair_all<decltype(s), decltype(t)>(pair);
  });
  const SegmentMax& pool = pair.second.key_pool;
  if (pool.segments > 0) segment_max_backward_cpu(one_part(pool));
}

}  // namespace combiner::attention::fused
