// The CPU model of the fused kernels (fused/kernel.h): the same tiles, in the same order, with
// the same formulas as kernel_*.cu, in plain loops, so that what the tests prove here is
// what the GPU runs. Where a CUDA warp works on 16 rows of a tile at once, this works row by row;
// the online-softmax rescaling, the log2-domain exponentials, the saved log-sum-exp and the
// backward's recomputation dS = P (dP - delta) are the kernels' own. Storage S is float, double
// or bfloat16; arithmetic T is S, or float32 for bfloat16 (operands read from bfloat16, stored
// outputs rounded to it; the CUDA kernels also round P and dS to bfloat16 for their tensor-core
// products, which this model does not).
#include "attention/fused/cpu_dispatch.h"
#include "attention/fused/kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "util/bfloat16.h"

namespace combiner::attention::fused {

namespace cpu_model {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

// bfloat16 storage (util/bfloat16.h: rounded to nearest even, as __float2bfloat16).
using util::to_math;
using util::to_storage;

// Row `row` of head (b, h) of x as D values of T.
template <typename S, typename T>
void load_row(const Operand& x, int64_t b, int64_t h, int64_t row, int64_t D, T* out) {
  const S* in = static_cast<const S*>(x.data) + b * x.batch + h * x.head + row * x.row;
  for (int64_t d = 0; d < D; ++d) out[d] = to_math<S, T>(in[d]);
}
template <typename S, typename T>
std::vector<T> row_of_head(const Operand& x, int64_t b, int64_t h, int64_t row, int64_t D) {
  std::vector<T> out(D);
  load_row<S, T>(x, b, h, row, D, out.data());
  return out;
}

// Index i of segment g of `at`'s rows of x as D values of T or, `pooled` (Pass::pooled), the
// running max of its indices 0..i, element by element (RunningMax's rule).
template <typename S, typename T>
std::vector<T> segment_row(const Operand& x,
                           int64_t b,
                           int64_t h,
                           const Geometry& at,
                           int64_t g,
                           int64_t i,
                           int64_t D,
                           bool pooled) {
  if (!pooled) return row_of_head<S, T>(x, b, h, row_of(at, g, i), D);
  std::vector<T> best(D), v(D);
  for (int64_t t = 0; t <= i; ++t) {
    load_row<S, T>(x, b, h, row_of(at, g, t), D, v.data());
    for (int64_t d = 0; d < D; ++d)
      if (running_max_takes(t, v[d], best[d])) best[d] = v[d];
  }
  return best;
}
// Index i of segment g of `at`'s rows, read in turn (a tile's rows, a walk's queries): where the
// row read before it was index i - 1 of the same segment, a pooled row is that one's running
// max and row i's, else segment_row's from the segment's start.
template <typename S, typename T>
class SegmentRows {
 public:
  SegmentRows(const Operand& x, const Geometry& at, int64_t b, int64_t h, int64_t D, bool pooled)
      : x_(x), at_(at), b_(b), h_(h), D_(D), pooled_(pooled) {}
  const std::vector<T>& row(int64_t g, int64_t i) {
    if (!pooled_ || g != g_ || i != i_ + 1) {
      row_ = segment_row<S, T>(x_, b_, h_, at_, g, i, D_, pooled_);
    } else {
      std::vector<T> v(D_);
      load_row<S, T>(x_, b_, h_, row_of(at_, g, i), D_, v.data());
      for (int64_t d = 0; d < D_; ++d)
        if (running_max_takes(i, v[d], row_[d])) row_[d] = v[d];
    }
    g_ = g;
    i_ = i;
    return row_;
  }

 private:
  const Operand& x_;
  const Geometry& at_;
  int64_t b_, h_, D_;
  bool pooled_;
  int64_t g_ = -1, i_ = -1;
  std::vector<T> row_;
};
// The pass's queries as its kernels hold them: q's rows, or their running max down the segment.
template <typename S, typename T>
SegmentRows<S, T> query_rows_of(const Pass& p, int64_t b, int64_t h) {
  return SegmentRows<S, T>(p.q, p.pooled ? p.pooled_query : p.query, b, h, p.dim, p.pooled);
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T out = 0;
  for (int64_t d = 0; d < n; ++d) out += a[d] * b[d];
  return out;
}

// Writes (or adds) one gradient row `g` of `width` values to out's row `row` of head (b, h):
// kStore in the storage type (plus the addend, which may be dst itself: read first), kStoreAcc
// and kAtomic in Acc = T.
template <typename S, typename T>
void write_grad(const GradOut& out, const Pass& p, int64_t b, int64_t h, int64_t row, const T* g) {
  const int64_t D = p.dim, at = grad_at(out, b, h, row);
  if (out.kind == GradOut::kStore) {
    auto* dst = static_cast<S*>(out.data) + at;
    const auto* add = static_cast<const T*>(out.addend);
    const auto* add_s = static_cast<const S*>(out.addend);
    for (int64_t d = 0; d < D; ++d) {
      const T a = !out.addend             ? T(0)
                  : out.addend_in_storage ? to_math<S, T>(add_s[at + d])
                                          : add[at + d];
      dst[d] = to_storage<S>(g[d] + a);
    }
  } else if (out.kind == GradOut::kStoreAcc) {
    std::copy(g, g + D, static_cast<T*>(out.data) + at);
  } else if (out.kind == GradOut::kAtomic) {
    auto* dst = static_cast<T*>(out.data) + at;
    for (int64_t d = 0; d < D; ++d) dst[d] += g[d];
  }
}

// The keys of one tile of query CTA `cta` (fused/kernel.h tile_key): the tile index runs over
// source A's tiles, then source B's; column c holds key[c] (where valid).
template <typename T>
struct KeyTile {
  bool summary = false;
  std::vector<TileIndex> key;
  std::vector<T> k, v;  // [kKeyTile, D]
};

// Key rows of segment g's key i: source A's (k, v) or B's (ks, u).
inline int64_t key_row_of(const Pass& p, bool summary, int64_t g, int64_t i) {
  return summary ? summary_key_row(p, g, i) : row_of(p.key, g, i);
}
inline int64_t value_row_of(const Pass& p, bool summary, int64_t g, int64_t i) {
  return summary ? summary_value_row(p, g, i) : row_of(p.value, g, i);
}

template <typename S, typename T>
void load_key_rows(const Pass& p, int64_t b, int64_t h, KeyTile<T>& kt) {
  const int64_t D = p.dim;
  kt.k.assign(kKeyTile * D, 0);
  kt.v.assign(kKeyTile * D, 0);
  for (int64_t c = 0; c < kKeyTile; ++c) {
    const TileIndex& key = kt.key[c];
    if (!key.valid) continue;
    load_row<S>(
        kt.summary ? p.ks : p.k, b, h, key_row_of(p, kt.summary, key.g, key.i), D, &kt.k[c * D]);
    load_row<S>(
        kt.summary ? p.u : p.v, b, h, value_row_of(p, kt.summary, key.g, key.i), D, &kt.v[c * D]);
  }
}

template <typename S, typename T>
KeyTile<T> key_tile(
    const Pass& p, int64_t b, int64_t h, int64_t cta, int64_t tile, int64_t direct) {
  KeyTile<T> kt;
  kt.summary = tile >= direct;
  for (int64_t c = 0; c < kKeyTile; ++c) kt.key.push_back(tile_key(p, cta, tile, direct, c));
  load_key_rows<S>(p, b, h, kt);
  return kt;
}

// Whether query q sees column c of the tile: a key of its own segment that its mask allows.
template <typename T>
bool allowed(const Pass& p, const KeyTile<T>& kt, int64_t c, const TileIndex& q) {
  const TileIndex& key = kt.key[c];
  return key.valid && key.g == q.g &&
         (kt.summary ? summary_allows(p, q.i, key.i) : mask_allows(p.mask, q.i, key.i));
}

// The rows of query CTA `cta`'s tile (fused/kernel.h tile_query); false when none exists.
inline bool query_rows(const Pass& p, int64_t cta, std::vector<TileIndex>& rows) {
  bool any = false;
  rows.clear();
  for (int64_t r = 0; r < kQueryTile; ++r) {
    rows.push_back(tile_query(p, cta, r));
    any = any || rows.back().valid;
  }
  return any;
}

// A pooled pass's keys of one tile of source A, as the forward writes them: each key's running
// max down its segment, at its row of ks.
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
    if (f.pooled_keys && !kt.summary) write_pooled_keys<S, T>(f, b, h, kt);
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
    if (!f.merge) {
      for (int64_t d = 0; d < D; ++d) o_out[d] = to_storage<S>(acc[r * D + d] * inv);
      *lse = lse2 * T(kLn2);
    } else if (l[r] > 0) {  // log-sum-exp of the two passes; rows without terms keep theirs
      const T prev2 = *lse * T(kLog2e), top = std::max(prev2, lse2);
      const T total2 = top + std::log2(std::exp2(prev2 - top) + std::exp2(lse2 - top));
      const T w_prev = std::exp2(prev2 - total2), w_new = std::exp2(lse2 - total2) * inv;
      for (int64_t d = 0; d < D; ++d)
        o_out[d] = to_storage<S>(w_prev * to_math<S, T>(o_out[d]) + w_new * acc[r * D + d]);
      *lse = total2 * T(kLn2);
    }
  }
}

// The running max's backward down one segment of n steps, element d (RunningMax with
// `accumulate`): dy summed over the steps whose max is x[t], added at t by add(t, sum).
template <typename T, typename X, typename Dy, typename Add>
void running_max_backward_line(int64_t n, X x, Dy dy, Add add) {
  T best = 0, sum = 0;
  int64_t at = 0;  // the step holding the running max
  for (int64_t t = 0; t < n; ++t) {
    const T v = x(t);
    if (running_max_takes(t, v, best)) {
      if (t > 0) add(at, sum);
      best = v;
      at = t;
      sum = 0;
    }
    sum += dy(t);
  }
  if (n > 0) add(at, sum);
}

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
          });
      running_max_backward_line<T>(
          valid_count(p.key, g),
          [&](int64_t j) { return at(p.k, row_of(p.key, g, j), d); },
          [&](int64_t j) { return at(bw.d_pooled_keys, row_of(p.pooled_keys, g, j), d); },
          [&](int64_t j, T sum) {
            S& e = element(bw.dk, row_of(p.key, g, j), d);
            e = to_storage<S>(to_math<S, T>(e) + sum);
          });
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
  for (auto& x : dq) x *= T(p.scale);
  if (bw.pools_dq.kind != GradOut::kNone) return pools_backward_tile<S, T>(bw, b, h, qs, dq);
  for (int64_t r = 0; r < M; ++r)
    if (qs[r].valid) write_grad<S>(bw.dq, p, b, h, row_of(p.query, qs[r].g, qs[r].i), &dq[r * D]);
}

// dK, dV of dk/dv CTA `cta` of `keys` (fused/kernel.h dkv_column; by prefix, summary tile `cta`
// against the queries of part `part`), walking the query tiles that can see its keys
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
  for (auto& x : dk) x *= T(p.scale);
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
    if (bw.summary_delta && bw.summary_delta_of_a == a &&
        !prefix) {  // u . du as stored: delta_all's dot
      const GradOut& du = a ? bw.dv : bw.du;
      const Operand stored{du.data, du.stride[0], du.stride[1], du.stride[2]};
      static_cast<T*>(bw.summary_delta)[(b * p.heads + h) * bw.summary_delta_rows + v_row] =
          dot(&kt.v[c * D], row_of_head<S, T>(stored, b, h, v_row, D).data(), D);
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
            dot(row_of_head<S, T>(d.o, b, h, r, d.dim).data(),
                row_of_head<S, T>(d.d_o, b, h, r, d.dim).data(),
                d.dim);
}

// Backward::made_delta: the delta of query CTA `cta`'s rows, delta_all's.
template <typename S, typename T>
void make_delta_tile(const Backward& bw, int64_t b, int64_t h, int64_t cta) {
  const Pass& p = bw.pass;
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const TileIndex q = tile_query(p, cta, r);
    if (!q.valid) continue;
    const int64_t row = row_of(p.query, q.g, q.i);
    static_cast<T*>(bw.made_delta)[(b * p.heads + h) * p.query.limit + row] =
        dot(row_of_head<S, T>(bw.o, b, h, row, p.dim).data(),
            row_of_head<S, T>(bw.d_o, b, h, row, p.dim).data(),
            p.dim);
  }
}

template <typename S, typename T>
void backward_all(const Backward& bw) {
  const Pass& p = bw.pass;
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.heads; ++h) {
      if (segment_backward(p)) {
        // One CTA per segment (kernel_backward.cu segment_backward_kernel): its keys of source
        // A, then of source B, then its queries' dq, which may overwrite d_o rows that only
        // this segment reads.
        for (int64_t cta = 0; cta < query_ctas(p); ++cta) {
          if (bw.made_delta) make_delta_tile<S, T>(bw, b, h, cta);
          backward_dkv_tile<S, T>(bw, b, h, Keys::kSourceA, cta, 0);
          if (p.summaries) backward_dkv_tile<S, T>(bw, b, h, Keys::kSegmentSummaries, cta, 0);
          backward_dq_tile<S, T>(bw, b, h, cta);
        }
        continue;
      }
      // dk, dv first, as the kernels: dq may overwrite d_o in place (Backward in kernel.h).
      // One launch on a GPU: source A's key tiles, then source B's by segment.
      for (int64_t cta = 0; cta < key_ctas(p, false); ++cta)
        backward_dkv_tile<S, T>(bw, b, h, Keys::kSourceA, cta, 0);
      if (p.summaries && p.by_segment) {
        for (int64_t cta = 0; cta < key_ctas(p, true); ++cta)
          backward_dkv_tile<S, T>(bw, b, h, Keys::kSegmentSummaries, cta, 0);
      } else if (p.summaries) {
        const int64_t parts = ceil_div(p.query.segments, segments_per_part(p));
        for (int64_t st = 0; st < ceil_div(p.summary_count, kKeyTile); ++st)
          for (int64_t part = 0; part < parts; ++part)
            backward_dkv_tile<S, T>(bw, b, h, Keys::kPrefixSummaries, st, part);
      }
      for (int64_t cta = 0; cta < query_ctas(p); ++cta) backward_dq_tile<S, T>(bw, b, h, cta);
    }
}

}  // namespace cpu_model

void forward_cpu(const Forward& f) {
  cpu_model::dispatch(f.pass.dtype,
                      [&](auto s, auto t) { cpu_model::forward_all<decltype(s), decltype(t)>(f); });
}

void delta_cpu(const Delta& d) {
  cpu_model::dispatch(d.dtype,
                      [&](auto s, auto t) { cpu_model::delta_all<decltype(s), decltype(t)>(d); });
}

void backward_cpu(const Backward& b) {
  cpu_model::dispatch(
      b.pass.dtype, [&](auto s, auto t) { cpu_model::backward_all<decltype(s), decltype(t)>(b); });
}

}  // namespace combiner::attention::fused
