// The fused backward's dk/dv walk (kernel_backward.cu's kernels), line for line the CPU model's
// backward_dkv_tile (fused/kernel_cpu.cpp): one CTA per 64-key tile (a segment's, or a pack
// group's keys of short segments, kernel_index.h segment_pack, whose queries it walks); each warp
// owns 16 keys and computes S^T = K Q^T and dP^T = V dO^T directly (no transposes), dV += P^T dO,
// dK += dS^T Q, walking the query tiles that see its keys: its own segment's (source A, and
// source B by segment), or for a summary tile by prefix the queries of a run of later segments,
// whose partial sums are added atomically (fp32).
#pragma once

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_tile.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

// Q and dO (two stages), K and V, lse, delta and the per-query rows and (by prefix) summary
// counts (two stages of each), the fp32 path's scratch; packed, each key's segment, index and
// its segment's query count.
template <typename T, int D>
__host__ __device__ constexpr size_t dkv_smem() {
  constexpr int MQ = backward_query_tile(D);
  return size_t(2 * kKeyTile + 4 * MQ) * pitch<T, D>() * sizeof(T) + 2 * 4 * MQ * sizeof(float) +
         size_t(kWarps) * scratch_floats<T, MQ>() * sizeof(float) +
         size_t(3 * kKeyTile) * sizeof(int);
}
// The one-CTA-per-segment backward's dS rows: a key tile's columns and 4 floats of padding.
constexpr int kDsPitch = kKeyTile + 4;

// Backward::made_delta: delta = d_o . o for each of a walk tile's ROWS queries (row(i): its row
// of o and d_o, or -1), d_o as the tile holds it, o's row read here, summed as the delta kernel
// sums it (piece_dot; own_delta of it where `other`, the other call's deltas of this (b, h), is
// not null); into the tile's deltas (0 where no row) and, where `write`, into made[row] for the
// launches and passes after this walk.
template <typename T, int D, int ROWS, typename RowFn>
__device__ __forceinline__ void make_deltas(const T* d_o_tile,
                                            const T* o0,
                                            int64_t o_row,
                                            RowFn row,
                                            float* deltas,
                                            float* made,
                                            const float* other,
                                            bool write) {
  constexpr int E = 16 / int(sizeof(T)), kPieces = D / E, P = pitch<T, D>();
  constexpr int kPerThread = ROWS * kPieces / kThreads;
  static_assert(ROWS * kPieces % kThreads == 0, "whole pieces per thread");
  int64_t at[kPerThread];
  uint4 bits[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {  // every load first
    const int piece = threadIdx.x + i * kThreads, r = piece / kPieces, c = piece % kPieces * E;
    at[i] = row(r);
    bits[i] = at[i] >= 0 ? *reinterpret_cast<const uint4*>(o0 + at[i] * o_row + c)
                         : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int piece = threadIdx.x + i * kThreads, r = piece / kPieces, c = piece % kPieces * E;
    float o[E], d_o[E];
    to_floats(bits[i], o);
    to_floats(*reinterpret_cast<const uint4*>(d_o_tile + r * P + c), d_o);
    float sum = piece_dot<kPieces>(o, d_o);
    if (c == 0) {
      if (at[i] >= 0) sum = own_delta(sum, other, at[i]);
      deltas[r] = at[i] >= 0 ? sum : 0.f;
      if (at[i] >= 0 && write) made[at[i]] = sum;
    }
  }
}

// A segment max's backward for segment g, rows lo..hi-1 of it: each column's arg-max over the
// segment's rows of x, read again (L2 holds them), and dy[g] added into dx there where it is one
// of those rows, a column a thread, as the segment max kernel's backward (accumulate) adds it.
template <typename T, int D>
__device__ __forceinline__ void add_at_arg_max(const SegmentMax& m, int64_t g, int lo, int hi) {
  const int64_t b = index_div(blockIdx.y, m.heads), h = index_mod(blockIdx.y, m.heads);
  const T* x =
      static_cast<const T*>(m.x) + b * m.stride[0] + h * m.stride[1] + g * m.len * m.stride[2];
  const int len = int(m.len);
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float best = 0.f;
    int at = -1;
    for (int c = 0; c < len; ++c) {
      const float v = scalar_float(x[c * m.stride[2] + d]);
      if (segment_max_takes(c, v, best)) {
        best = v;
        at = c;
      }
    }
    if (at < lo || at >= hi) continue;  // another CTA's row
    const float grad = segment_max_dy<T>(m, b * m.heads + h, g, d);
    T* e = static_cast<T*>(m.dx) + b * m.dx_stride[0] + h * m.dx_stride[1] +
           (g * m.len + at) * m.dx_stride[2] + d;
    *e = scalar_as<T>(scalar_float(*e) + grad);
  }
}

// Backward::key_pool in a dk/dv walk's CTA (key tile `cta` of an unpacked pass, after its
// dkv_tile; one CTA per segment takes it from its key tile: kernel_segment.cuh
// key_pool_backward), once the walk has stored dk's rows of its keys: the segment's rows of k read
// again (this tile's were just loaded, the segment's others by its neighbours), and dy[g] added
// where the arg-max is one of this tile's rows. No other CTA writes these rows of dk: the pool
// launch's sums. The barrier orders the walk's stores of the rows before these loads. A call (not
// inlined): the walk before it holds up to 255 registers, and inlined this spills them.
template <typename T, int D>
__device__ COMBINER_NOINLINE void key_pool_walk_backward(const Backward& bw, int64_t cta) {
  const SegmentMax& m = bw.key_pool;
  const TileIndex tile = dkv_key(bw.pass, false, cta, 0);  // its first key: segment g, index i
  __syncthreads();
  if (tile.g >= m.segments) return;
  add_at_arg_max<T, D>(m, tile.g, int(tile.i), int(tile.i) + kKeyTile);
}

// Backward::query_pool in the CTA of segment g's one query (the dq kernel's, or one CTA per
// segment), once it has stored that query's gradient, dy's row g: dy[g] added into dx at each
// column's arg-max of the segment's rows of q. The barrier orders the CTA's stores of dy's row
// before these loads of it. A call, as above.
template <typename T, int D>
__device__ COMBINER_NOINLINE void query_pool_backward(const Backward& bw, int64_t g) {
  const SegmentMax& m = bw.query_pool;
  __syncthreads();
  if (g >= m.segments) return;
  add_at_arg_max<T, D>(m, g, 0, int(m.len));
}

// One dk/dv CTA: `cta` numbers the CTAs of its kind of keys (segment g, key tile; PACKED, a pack
// group's keys, kernel_index.h dkv_key) or, by prefix, (summary tile, part).
// DQ (segment_backward passes: one key tile, the walk's query tiles one segment's or pack
// group's): each tile's dS^T is also stored as dS, row f of the walk's queries by key column
// (fp32), after dk/dv's shared memory, and dk and dv are staged in the query tiles' memory, so
// that the keys stay for the caller's dS K. Returns whether it walked a query tile (else it wrote
// no dS).
template <typename T, int D, Keys KEYS, bool PACKED, bool DQ = false>
__device__ __forceinline__ bool dkv_tile(const Backward& bw, int64_t cta, unsigned char* smem) {
  constexpr int P = pitch<T, D>(), N = kKeyTile, MQ = backward_query_tile(D);
  constexpr bool A = KEYS == Keys::kSourceA, SUMMARY = KEYS == Keys::kPrefixSummaries;
  static_assert(!(SUMMARY && PACKED), "summaries by prefix are not packed");
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + N * P;
  T* qs = vs + N * P;                                        // [2][MQ][P]
  T* dos = qs + 2 * MQ * P;                                  // [2][MQ][P]
  float* lses = reinterpret_cast<float*>(dos + 2 * MQ * P);  // [2][MQ], natural log
  float* deltas = lses + 2 * MQ;                             // [2][MQ]
  int* seen = reinterpret_cast<int*>(deltas + 2 * MQ);       // [2][MQ] (by prefix)
  int* rows = seen + 2 * MQ;   // [2][MQ] (by prefix); packed: [kQueryTile], the group's queries
  int* k_seg = rows + 2 * MQ;  // [N] (packed)
  int* k_idx = k_seg + N;      // [N] (packed)
  int* k_queries = k_idx + N;  // [N] (packed)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(k_queries + N) + warp * scratch_floats<T, MQ>();
  static_assert(N == kStagedRows && staged_bytes<D>() <= size_t(2 * N + 4 * MQ) * P * sizeof(T),
                "the epilogue's tile (the index tables after it survive it)");
  static_assert(!DQ || !SUMMARY, "DQ: source A's or B's by segment");
  static_assert(staged_bytes<D>() <= size_t(4 * MQ) * P * sizeof(T),
                "DQ, or u's delta: dk and dv staged in the query tiles' memory, the keys and "
                "values kept (for dS K, for u . du)");
  [[maybe_unused]] float* ds = reinterpret_cast<float*>(smem + dkv_smem<T, D>());

  const Pass& p = bw.pass;
  const Mask mask = A ? p.mask : p.summary_mask;
  const int64_t b = index_div(blockIdx.y, p.heads), h = index_mod(blockIdx.y, p.heads);
  int64_t g = 0, f_begin = 0, f_end = 0;
  int j0 = 0, key_count = 0;
  if constexpr (SUMMARY) {
    const int64_t parts = index_ceil_div(p.query.segments, segments_per_part(p));
    const int64_t per = segments_per_part(p), part = index_mod(cta, parts);
    j0 = int(index_div(cta, parts)) * N;
    key_count = int(p.summary_count);
    const int64_t g_lo = max(part * per, int64_t(j0) + 1);
    const int64_t g_hi = min((part + 1) * per, p.query.segments);
    if (g_hi <= g_lo || j0 >= key_count) return false;  // atomic outputs: nothing to add
    f_begin = g_lo * p.query.seg_len;
    f_end = g_hi * p.query.seg_len;
  } else if constexpr (PACKED) {
    // The group's keys by table (its first segment g: k_seg is relative to it); every query of
    // its segments, as flat indices f (kernel_index.h packed_query), its row in `rows` (-1: none),
    // found once here rather than once per query tile.
    static_assert(kQueryTile <= 2 * MQ, "a pack group's queries fit the rows table");
    const int64_t pack = segment_pack(p);
    g = cta * pack;
    bool any = false;
    for (int c = threadIdx.x; c < N; c += kThreads) {
      const TileIndex k = dkv_key(p, !A, cta, c);
      k_seg[c] = int(k.g - g);
      k_idx[c] = k.valid ? int(k.i) : -1;
      k_queries[c] = k.valid && k.g < p.query.segments ? int(valid_count(p.query, k.g)) : 0;
      any = any || k.valid;
    }
    for (int f = threadIdx.x; f < kQueryTile; f += kThreads) {
      const TileIndex q = packed_query(p, cta, f);
      rows[f] = q.valid ? int(row_of(p.query, q.g, q.i)) : -1;
    }
    if (!__syncthreads_or(any)) return false;  // no key: no gradient to write
    key_count = N;
    f_end = pack * p.query.seg_len;
  } else {
    const int64_t tiles = ceil_div(A ? p.key.seg_len : p.summary_key.seg_len, N);
    g = index_div(cta, tiles);
    j0 = int(index_mod(cta, tiles)) * N;
    key_count = int(A ? valid_count(p.key, g) : summary_terms(p, g));
    if (j0 >= key_count) return false;
    f_begin = first_query_tile(mask, j0, MQ);
    f_end = valid_count(p.query, g);
  }
  // q's rows lie query_source_shift rows from the queries' (a pooled pass's: kernel_index.h); q_any
  // is a valid address for the copies that load nothing.
  const T* q_any = at<T>(p.q, b, h, 0);
  const T* q0 = q_any + query_source_shift(p) * p.q.row;
  const T* do0 = at<T>(bw.d_o, b, h, 0);
  const T* k0 = at<T>(A ? p.k : p.ks, b, h, 0);
  const T* v0 = at<T>(A ? p.v : p.u, b, h, 0);
  const int64_t k_row = A ? p.k.row : p.ks.row, v_row = A ? p.v.row : p.u.row;
  // Key column c's segment and index (-1: none).
  auto key_seg = [&](int c) -> int64_t {
    if constexpr (PACKED) return g + k_seg[c];
    return g;
  };
  auto key_idx = [&](int c) -> int {
    if constexpr (PACKED) return k_idx[c];
    return j0 + c < key_count ? j0 + c : -1;
  };
  auto key_row = [&](int c) {
    return A ? row_of(p.key, key_seg(c), key_idx(c)) : summary_key_row(p, key_seg(c), key_idx(c));
  };
  auto value_row = [&](int c) {
    return A ? row_of(p.value, key_seg(c), key_idx(c))
             : summary_value_row(p, key_seg(c), key_idx(c));
  };
  load_rows<T, D, N>(
      ks,
      [&](int c) -> const T* { return key_idx(c) >= 0 ? k0 + key_row(c) * k_row : nullptr; },
      k0);
  load_rows<T, D, N>(
      vs,
      [&](int c) -> const T* { return key_idx(c) >= 0 ? v0 + value_row(c) * v_row : nullptr; },
      v0);
  // Query tile at flat index f0 into stage `stage`, all asynchronous: by segment, lse and delta
  // by cp.async, then the rows of q and dO, row_stride apart; packed, the same through the rows
  // found above; by prefix, per query once (not per 16-byte chunk) its row (-1 if none), lse and
  // delta by cp.async and how many summaries it sees (`seen`), then the rows of q and dO through
  // the row table.
  const float* lse0 = static_cast<const float*>(bw.lse) + (b * p.heads + h) * p.query.limit;
  const float* delta0 = static_cast<const float*>(bw.delta) + (b * p.heads + h) * p.query.limit;
  // kernel_pass.h Backward::made_delta: each query tile's delta made here, not loaded (written out
  // by a segment's one CTA, or, by the walk alone, by its first key tile's). Built where a pass can
  // ask it: one CTA per segment (DQ), or an unpacked walk whose dq has a launch of its own
  // (walk_makes_delta).
  constexpr bool kMakesDelta = A && (DQ || (!PACKED && !interleaved_backward_built(D)));
  const bool make_delta = kMakesDelta && bw.made_delta != nullptr;
  auto load_queries = [&](int64_t f0, int stage) {
    if constexpr (!PACKED && !SUMMARY) {
      // By segment: query f is row f of segment g, its rows row_stride apart.
      const int64_t start = row_of(p.query, g, 0), step = p.query.row_stride;
      for (int i = threadIdx.x; i < MQ; i += kThreads) {
        const bool valid = f0 + i < f_end;
        const int64_t row = valid ? start + (f0 + i) * step : 0;
        cp_async4(lses + stage * MQ + i, lse0 + row, valid);
        cp_async4(deltas + stage * MQ + i, delta0 + row, valid && !make_delta);
      }
      load_strided<T, D, MQ>(
          qs + stage * MQ * P, q0, start * p.q.row, step * p.q.row, int(f0), int(f_end), q_any);
      load_strided<T, D, MQ>(dos + stage * MQ * P,
                             do0,
                             start * bw.d_o.row,
                             step * bw.d_o.row,
                             int(f0),
                             int(f_end),
                             do0);
      return;
    }
    // The table's rows of this tile: packed, the group's query f0 + i; by prefix, filled here.
    const int* tile_rows = PACKED ? rows + f0 : rows + stage * MQ;
    if constexpr (PACKED) {
      for (int i = threadIdx.x; i < MQ; i += kThreads) {
        const int row = tile_rows[i];
        cp_async4(lses + stage * MQ + i, lse0 + max(row, 0), row >= 0);
        cp_async4(deltas + stage * MQ + i, delta0 + max(row, 0), row >= 0 && !make_delta);
      }
    } else {  // by prefix: the queries of a run of segments
      for (int i = threadIdx.x; i < MQ; i += kThreads) {
        const int64_t f = f0 + i;
        TileIndex q;
        q.g = index_div(f, p.query.seg_len);
        q.i = index_mod(f, p.query.seg_len);
        q.valid = q.i < valid_count(p.query, q.g);
        const bool valid = f < f_end && q.valid;
        const int64_t row = valid ? row_of(p.query, q.g, q.i) : 0;
        rows[stage * MQ + i] = valid ? int(row) : -1;
        cp_async4(lses + stage * MQ + i, lse0 + row, valid);
        cp_async4(deltas + stage * MQ + i, delta0 + row, valid);
        seen[stage * MQ + i] = valid ? int(summary_terms(p, q.g)) : 0;
      }
      __syncthreads();  // every thread reads the rows below
    }
    auto rows_of = [&](const T* x0, int64_t stride) {
      return [=](int i) -> const T* {
        const int row = tile_rows[i];
        return row >= 0 ? x0 + int64_t(row) * stride : nullptr;
      };
    };
    load_rows<T, D, MQ>(qs + stage * MQ * P, rows_of(q0, p.q.row), q_any);
    load_rows<T, D, MQ>(dos + stage * MQ * P, rows_of(do0, bw.d_o.row), do0);
  };
  const int n_tiles = f_end > f_begin ? int(ceil_div(f_end - f_begin, MQ)) : 0;
  if (n_tiles > 0) load_queries(f_begin, 0);
  cp_async_commit();

  const int jw = j0 + warp * 16;  // this warp's first key (unpacked)
  // This thread's two keys are tile rows 16 warp + gq and + 8 (packed: their segment, index and
  // query count in the tables, read where needed rather than held).
  const bool warp_active =
      PACKED ? __any_sync(0xffffffffu, k_idx[warp * 16 + gq] >= 0 || k_idx[warp * 16 + gq + 8] >= 0)
             : jw < key_count;
  const float scale2 = float(p.scale) * kLog2e;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.f;

  [[maybe_unused]] ColumnMax<T, D> pooled;  // a pooled pass's queries, down the segment
  if constexpr (A && !PACKED) {
    // Past the segment's first query tile (a key tile the first queries do not see), carried
    // from the queries before the walk's first, read again from q.
    if (p.pooled && f_begin > 0)
      pooled.carry(int(f_begin), [&](int i) { return q0 + row_of(p.query, g, i) * p.q.row; });
  }
  for (int tile = 0; tile < n_tiles; ++tile) {
    const int64_t f0 = f_begin + int64_t(tile) * MQ;
    if (tile + 1 < n_tiles) {
      load_queries(f0 + MQ, (tile + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int stage = tile & 1;
    if constexpr (kMakesDelta) {
      if (make_delta) {
        const T* o0 = at<T>(bw.o, b, h, 0);
        const int64_t head_rows = (b * p.heads + h) * p.query.limit;
        float* made = static_cast<float*>(bw.made_delta) + head_rows;
        const float* other =
            bw.other_delta ? static_cast<const float*>(bw.other_delta) + head_rows : nullptr;
        make_deltas<T, D, MQ>(
            dos + stage * MQ * P,
            o0,
            bw.o.row,
            [&](int i) -> int64_t {
              const int64_t f = f0 + i;
              if (f >= f_end) return -1;
              if constexpr (PACKED) return rows[f];
              return row_of(p.query, g, f);
            },
            deltas + stage * MQ,
            made,
            other,
            DQ || j0 == 0);  // by the walk alone, the segment's first key tile's CTA writes
        __syncthreads();
      }
    }
    if constexpr (A) {
      if (p.pooled) {
        // kernel_pass.h Pass::pooled: the tile's queries become their running max down the segment,
        // continued from the walk's earlier tile, or from the queries before its first.
        T* qt = qs + stage * MQ * P;
        pooled.walk(
            qt,
            MQ,
            [&](int i) {
              const int64_t f = f0 + i;
              if constexpr (PACKED)
                return f < f_end && rows[f] >= 0 ? (index_mod(f, p.query.seg_len) == 0 ? 0 : 1)
                                                 : -1;
              return f < f_end ? (f == 0 ? 0 : 1) : -1;
            },
            [&](int i) -> T* { return qt + i * P; });
        __syncthreads();
      }
    }
    // By segment: a warp none of whose keys a query of the tile sees skips it (causal masks).
    const bool skip = !warp_active || (!SUMMARY && !PACKED && may_skip(mask, f0 + MQ - 1, jw));
    if (!skip) {
      const T* qt = qs + stage * MQ * P;
      const T* dot = dos + stage * MQ * P;
      float s[MQ / 8][4], dp[MQ / 8][4];
      warp_nt<D, MQ>(s, ks + warp * 16 * P, qt, scratch);    // S^T: keys x queries
      warp_nt<D, MQ>(dp, vs + warp * 16 * P, dot, scratch);  // dP^T
      // By segment: the queries of the tile that see this thread's keys, from its first column
      // (kernel_index.h Visible); packed, its keys' own segments' queries, f = seg x seg_len + t.
      Visible seen_by[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if constexpr (PACKED) {
          const int key = warp * 16 + gq + 8 * r, j = k_idx[key];
          const int first = int(f0) + 2 * qq - k_seg[key] * int(p.query.seg_len);
          seen_by[r] = j < 0 ? Visible{} : from(queries_seeing(mask, j, k_queries[key]), first);
        } else if constexpr (!SUMMARY) {
          const int j = jw + gq + 8 * r;
          seen_by[r] = j < key_count ? from(queries_seeing(mask, j, int(f_end)), int(f0) + 2 * qq)
                                     : Visible{};
        }
      }
#pragma unroll
      for (int i = 0; i < MQ / 8; ++i) {
        // This thread's two query columns of block i: their lse (as log2) and delta, read once
        // for both its keys.
        const int c0 = i * 8 + 2 * qq;
        const float2 lse = *reinterpret_cast<const float2*>(lses + stage * MQ + c0);
        const float2 delta = *reinterpret_cast<const float2*>(deltas + stage * MQ + c0);
        const float lse2[2] = {lse.x * kLog2e, lse.y * kLog2e}, dlt[2] = {delta.x, delta.y};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          bool ok;
          if constexpr (SUMMARY) {
            const int j = jw + gq + 8 * (e / 2), info = seen[stage * MQ + c0 + (e & 1)];
            ok = j < key_count && j < info;
          } else {
            ok = visible(seen_by[e / 2], i * 8 + (e & 1));
          }
          const float w = ok ? exp2_ftz(fmaf(s[i][e], scale2, -lse2[e & 1])) : 0.f;
          s[i][e] = w;                             // P^T
          dp[i][e] = w * (dp[i][e] - dlt[e & 1]);  // dS^T
        }
      }
      warp_nn<D, MQ>(dv, s, dot, scratch);
      warp_nn<D, MQ>(dk, dp, qt, scratch);
      if constexpr (DQ) {
        float* rows_ds = ds + tile * MQ * kDsPitch;  // (f_begin = 0)
#pragma unroll
        for (int i = 0; i < MQ / 8; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            rows_ds[(i * 8 + 2 * qq + (e & 1)) * kDsPitch + warp * 16 + gq + 8 * (e / 2)] =
                dp[i][e];
      }
    } else if constexpr (DQ) {
      for (int i = lane; i < 16 * MQ; i += 32)
        ds[(tile * MQ + i / 16) * kDsPitch + warp * 16 + i % 16] = 0.f;
    }
    __syncthreads();
  }

  cp_async_wait<0>();
  const GradOut& out_k = A ? bw.dk : bw.dks;
  const GradOut& out_v = A ? bw.dv : bw.du;
  // u's delta from du as stored and u's rows still in the value tile (kernel_pass.h
  // Backward::summary_delta).
  const bool u_delta = !SUMMARY && bw.summary_delta != nullptr && bw.summary_delta_of_a == A;
  float* tile =
      reinterpret_cast<float*>(DQ || u_delta ? reinterpret_cast<unsigned char*>(qs) : smem);
  write_gradient<T, D>(
      tile, out_k, dk, float(p.scale * bw.grad_scale), warp_active, [&](int c) -> int64_t {
        if (key_idx(c) < 0) return -1;
        return grad_at(out_k, b, h, key_row(c) + (A ? key_seg(c) * out_k.segment_rows : 0));
      });
  const auto v_offset = [&](int c) -> int64_t {
    if (key_idx(c) < 0) return -1;
    return grad_at(out_v, b, h, value_row(c) + (A ? key_seg(c) * out_v.segment_rows : 0));
  };
  if (u_delta) {
    float* deltas_u =
        static_cast<float*>(bw.summary_delta) + (b * p.heads + h) * bw.summary_delta_rows;
    write_gradient_dot<T, D>(
        tile, out_v, dv, float(bw.grad_scale), warp_active, v_offset, vs, deltas_u, value_row);
  } else {
    write_gradient<T, D>(tile, out_v, dv, float(bw.grad_scale), warp_active, v_offset);
  }
  return n_tiles > 0;
}

}  // namespace combiner::attention::fused::cuda_detail
