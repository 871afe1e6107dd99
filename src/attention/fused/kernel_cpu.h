// The CPU model's shared pieces (fused/kernel.h; kernel_cpu.cpp: the forward and delta,
// kernel_backward_cpu.cpp: the backward, kernel_scan_cpu.cpp: the scans): rows as the tiles
// hold them, a gradient row as the epilogue writes it, a tile's keys and queries, and the running
// max's backward down one line. Storage S, arithmetic T as in kernel_cpu.cpp.
#pragma once

#include "attention/fused/kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "util/bfloat16.h"

namespace combiner::attention::fused::cpu_model {

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

// The keys of one tile of query CTA `cta` (fused/kernel_index.h tile_key): the tile index runs over
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

// The rows of query CTA `cta`'s tile (fused/kernel_index.h tile_query); false when none exists.
inline bool query_rows(const Pass& p, int64_t cta, std::vector<TileIndex>& rows) {
  bool any = false;
  rows.clear();
  for (int64_t r = 0; r < kQueryTile; ++r) {
    rows.push_back(tile_query(p, cta, r));
    any = any || rows.back().valid;
  }
  return any;
}

// Delta of row `row` of head (b, h): sum_d x[d] * dx[d] (the delta kernel's value; the passes
// that make delta themselves take the same).
template <typename S, typename T>
T row_delta(const Operand& x, const Operand& dx, int64_t b, int64_t h, int64_t row, int64_t D) {
  return dot(
      row_of_head<S, T>(x, b, h, row, D).data(), row_of_head<S, T>(dx, b, h, row, D).data(), D);
}

// The running max's backward down one line of n steps k (RunningMax's rule, ties and NaN
// included): x(k) the line's values in scan order, dy(k) its output gradient. The sum of dy
// over the steps whose max is x(k) goes to taken(k, sum) at each step k that takes the running
// max, once its last such step has passed; every other step k goes to passed(k), in order.
template <typename T, typename X, typename Dy, typename Taken, typename Passed>
void running_max_backward_line(int64_t n, X x, Dy dy, Taken taken, Passed passed) {
  T best = 0, sum = 0;
  int64_t at = 0;  // the step holding the running max
  for (int64_t k = 0; k < n; ++k) {
    const T v = x(k);
    if (running_max_takes(k, v, best)) {
      if (k > 0) taken(at, sum);
      best = v;
      at = k;
      sum = 0;
    } else {
      passed(k);
    }
    sum += dy(k);
  }
  if (n > 0) taken(at, sum);
}

}  // namespace combiner::attention::fused::cpu_model
