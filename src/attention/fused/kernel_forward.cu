// The fused forward (and the backward's delta = rowsum(dO * O)), line for line the CPU model's
// forward_tile (fused/kernel_cpu.cpp). One CTA = 4 warps = one query tile of 64 rows of one
// segment and head (or of a pack group of short segments: kernel_index.h segment_pack); it walks
// the key tiles (source A: the segment's own keys up to the tile's last query; then source B: the
// summaries of the earlier segments, or its own by segment), double-buffered through cp.async,
// with the online softmax in registers: no score leaves the chip. Shared memory: Q [64 x P] +
// K, V [2 stages x 64 x P] (+ fp32 scratch; packed, 2 KB of index tables), P = D + 16 bytes of
// padding: bf16 D = 32 / 64 / 128: 25 / 45 / 85 KB; fp32: 62 / 102 / 182 KB.
//
// Cost at combiner-bench attention's GPU shape (B = 8, H = 8, D = 64, bf16; L 3072: s = W = 48,
// n = 64; L 12288: s = W = 96, n = 128), the floor each variant is measured against: the distinct
// bytes its launches move, counted from the plans (fused/traffic.h: --count's kernel_mib,
// --profile's table), over the bandwidth. docs/PERFORMANCE.md, "Bytes each launch moves", keeps
// the table and its command; at this code, forward + backward:
//   variant      L 3072 MiB   floor at 4.8 TB/s   L 12288 MiB   floor
//   flash             289.5   0.063 ms               1,158.4   0.25 ms
//   fixed             539.1   0.118 ms               2,140.4   0.47 ms
//   rowmajor          725.6   0.159 ms               2,910.6   0.64 ms
//   vertical        1,012.1   0.221 ms               5,488.4   1.20 ms
//   horizontal      1,800.2   0.393 ms               9,260.6   2.02 ms
// Measured on an H200 (docs/perf/attention-vs-flash.csv, with kernels older than these counts),
// as multiples of these floors: at L 3072 fixed 0.994 ms (8.4x), rowmajor 1.370 (8.6x), vertical
// 1.894 (8.6x), horizontal 2.958 (7.5x); at L 12288 4.25 ms (9.1x), 6.46 (10.2x), 8.77 (7.3x),
// 13.12 (6.5x). flash took 0.981 and 9.84 ms (15.5x and 39x its bytes' floor: its limit is
// arithmetic, 1,536 and 6,144 terms a query). Ours' floor is memory, not arithmetic:
// combiner-fixed at L 12288 takes ~112 terms a query (its block prefix, 48 on average, and 63.5
// summaries) x 64 x 2 products x 2 FLOP = 28.7 kFLOP, 23 GFLOP over 786k queries, 0.06 ms at
// ~400 TFLOP/s.

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_tile.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

// Q, K and V (two stages) and the fp32 path's scratch.
template <typename T, int D>
__host__ __device__ constexpr size_t forward_tile_bytes() {
  return size_t(kQueryTile + 4 * kKeyTile) * pitch<T, D>() * sizeof(T) +
         size_t(kWarps) * scratch_floats<T, kKeyTile>() * sizeof(float);
}
template <typename T, int D, bool PACKED>
__host__ __device__ constexpr size_t forward_smem() {
  return forward_tile_bytes<T, D>() + (PACKED ? packed_table_bytes(kQueryTile, kKeyTile) : 0);
}

// CTAs per SM the forward is built for (at most 65536 / (128 x that) registers a thread): bf16
// four at D 32 and three at D 64, fp32 three at D 32, else two. Stated, not left to ptxas's
// guess, which for some packed instances aimed at more CTAs than their registers allow, and
// spilled.
template <typename T, int D>
__host__ __device__ constexpr int forward_blocks_per_sm() {
  return D == 32 ? (sizeof(T) == 2 ? 4 : 3) : sizeof(T) == 2 && D == 64 ? 3 : 2;
}

// PACKED: the CTA's tile holds a pack group's segments (kernel_index.h segment_pack), each query
// and key column found through the index tables (kernel_tile.cuh PackedTables); else one chunk of
// one segment, indexed t0 + r and j0 + c. QUERY_POOL: whether Forward::query_pool is built (not
// in a pair, which carries none: pairable; there its code cost bf16 D 32 a spill).
template <typename T, int D, bool PACKED, bool QUERY_POOL = !PACKED>
__device__ __forceinline__ void forward_cta(const Forward& f, unsigned char* smem) {
  constexpr int P = pitch<T, D>(), M = kQueryTile, N = kKeyTile;
  static_assert(M == kStagedRows && staged_bytes<D>() <= forward_tile_bytes<T, D>(),
                "the epilogue's tile (the index tables after it survive it)");
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + M * P;      // [2][N][P]
  T* vs = ks + 2 * N * P;  // [2][N][P]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(vs + 2 * N * P) + warp * scratch_floats<T, N>();
  const PackedTables<M, N> tables(smem + forward_tile_bytes<T, D>());

  const Pass& p = f.pass;
  const int64_t cta = blockIdx.x, b = index_div(blockIdx.y, p.heads),
                h = index_mod(blockIdx.y, p.heads);
  const int64_t chunks = query_chunks(p);
  // Unpacked: segment g, its queries t0..t0 + rows - 1. Packed: g = the group's first segment.
  const int64_t g = PACKED ? cta * segment_pack(p) : index_div(cta, chunks);
  const int q_count = PACKED ? M : int(valid_count(p.query, g));
  const int t0 = PACKED ? 0 : int(index_mod(cta, chunks)) * M;
  if (t0 >= q_count) return;
  const int rows = min(M, q_count - t0);
  const int a_count = PACKED ? 0 : int(valid_count(p.key, g));
  const QueryTileKeys n = query_tile_keys(p, cta);
  const int n_direct = int(n.direct), n_tiles = int(n.total);
  const int s_count = PACKED ? 0 : int(summary_keys(p, g, t0 + rows - 1));
  if constexpr (PACKED) tables.fill(p, cta, g);  // then synchronised

  const T* q0 = at<T>(p.q, b, h, 0);
  const T* k0 = at<T>(p.k, b, h, 0);
  const T* v0 = at<T>(p.v, b, h, 0);
  // Forward::query_pool: the segment's rows of x in the query tile, their max its query (below).
  const SegmentMax& qp = f.query_pool;
  const bool query_pool = QUERY_POOL && qp.segments > 0;
  const T* x0 = query_pool ? static_cast<const T*>(qp.x) + b * qp.stride[0] + h * qp.stride[1] : q0;
  load_rows<T, D, M>(
      qs,
      [&](int r) -> const T* {
        if constexpr (PACKED) {
          const int t = tables.q_idx(r);
          return t >= 0 ? q0 + query_source_row(p, g + tables.q_seg(r), t) * p.q.row : nullptr;
        }
        if (query_pool) return r < qp.len ? x0 + (g * qp.len + r) * qp.stride[2] : nullptr;
        return t0 + r < q_count ? q0 + query_source_row(p, g, t0 + r) * p.q.row : nullptr;
      },
      q0);
  // Key tile `tile` into stage `stage`: source A's tiles first, then source B's.
  auto load_keys = [&](int tile, int stage) {
    const bool summary = tile >= n_direct;
    if constexpr (PACKED) {
      load_packed_keys<T, D>(ks + stage * N * P, vs + stage * N * P, tables, p, summary, b, h);
      return;
    }
    const SourceRows<T> src =
        summary ? source_b_rows<T>(p, b, h, g, s_count) : source_a_rows<T>(p, b, h, g, a_count);
    const int j0 = (summary ? tile - n_direct : tile) * N;
    load_strided<T, D, N>(ks + stage * N * P, src.k, 0, src.k_step, j0, src.count, k0);
    load_strided<T, D, N>(vs + stage * N * P, src.v, 0, src.v_step, j0, src.count, v0);
  };
  if (n_tiles > 0) load_keys(0, 0);
  cp_async_commit();
  if (query_pool) {
    // The max of the segment's rows, a column a thread as the segment max kernel takes it: the
    // tile's row 0, the CTA's one query, and y's row g. (Its first key tile has landed too.) Rows
    // past the tile's (a segment of more than kQueryTile) are read from x as they come.
    cp_async_wait<0>();
    __syncthreads();
    const int d = threadIdx.x;
    if (d < D) {
      const int step = int(qp.stride[2]);  // rows of a head below 2^31 (checks.cpp)
      const T* x = x0 + g * qp.len * qp.stride[2] + d;
      float best = 0.f;
      for (int r = 0; r < int(qp.len); ++r) {
        const float v = scalar_float(r < M ? qs[r * P + d] : x[r * step]);
        if (segment_max_takes(r, v, best)) best = v;
      }
      qs[d] = scalar_as<T>(best);
      static_cast<T*>(qp.y)[((b * qp.heads + h) * qp.segments + g) * qp.dim + d] =
          scalar_as<T>(best);
    }
    __syncthreads();
  }

  // A pooled pass: its queries pooled in the tile (its keys' running max: after the walk, below).
  if (p.pooled) pool_query_tile<T, D, PACKED>(qs, p, tables, b, h, g, t0, rows);

  const int tw = t0 + warp * 16;  // this warp's first query (unpacked)
  // This thread's two query rows (16 warp + gq and + 8): packed, their segment and index.
  int my_seg[2] = {0, 0}, my_t[2] = {-1, -1};
  if constexpr (PACKED) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      my_seg[r] = tables.q_seg(warp * 16 + gq + 8 * r);
      my_t[r] = tables.q_idx(warp * 16 + gq + 8 * r);
    }
  }
  const bool warp_active =
      PACKED ? __any_sync(0xffffffffu, my_t[0] >= 0 || my_t[1] >= 0) : tw < q_count;
  const float scale2 = float(p.scale) * kLog2e;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 1 < n_tiles) {
      load_keys(tile + 1, (tile + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bool summary = tile >= n_direct;
    const int j0 = (summary ? tile - n_direct : tile) * N, stage = tile & 1;
    const int count = summary ? s_count : a_count;
    const Mask mask = summary ? summary_mask_of(p) : p.mask;
    // A warp none of whose queries sees the tile's keys skips it (causal masks: fused/kernel.h).
    const bool skip = !warp_active || (!PACKED && may_skip(mask, tw + 15, j0));
    if (!skip) {
      float s[N / 8][4];
      warp_nt<D, N>(s, qs + warp * 16 * P, ks + stage * N * P, scratch);
      // The keys of the tile this thread's rows see, from its first column (kernel_index.h
      // Visible).
      Visible sees[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = tw + gq + 8 * r;
        if constexpr (PACKED)
          sees[r] = tables.keys_seen_by(p, warp * 16 + gq + 8 * r, summary, mask, 2 * qq);
        else
          sees[r] = t < q_count ? from(keys_seen(mask, t, count), j0 + 2 * qq) : Visible{};
      }
      // The scores stay unscaled: with scale2 > 0 (function.cpp checks it) the largest scaled
      // score is scale2 x the largest, and each weight is one FFMA and one EX2 away.
#pragma unroll
      for (int i = 0; i < N / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = i * 8 + (e & 1);
          const bool ok = PACKED ? visible(sees[e / 2], c) : visible_in_prefix(sees[e / 2], c);
          s[i][e] = ok ? s[i][e] : -INFINITY;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float top = -INFINITY;
#pragma unroll
        for (int i = 0; i < N / 8; ++i) top = fmaxf(top, fmaxf(s[i][2 * r], s[i][2 * r + 1]));
        top = quad_max(top) * scale2;
        const float m_new = fmaxf(m[r], top), m_use = m_new == -INFINITY ? 0.f : m_new;
        const float alpha = exp2_ftz(m[r] - m_use);
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < N / 8; ++i)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[i][e] = exp2_ftz(fmaf(s[i][e], scale2, -m_use));
            sum += s[i][e];
          }
        l[r] = l[r] * alpha + sum;  // this thread's columns; summed over the quad at the end
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) {
          o[dt][2 * r] *= alpha;
          o[dt][2 * r + 1] *= alpha;
        }
        m[r] = m_new;
      }
      warp_nn<D, N>(o, s, vs + stage * N * P, scratch);
    }
    __syncthreads();
  }

  cp_async_wait<0>();  // no copy in flight when the CTA ends (n_tiles = 0: only Q's)
  if (p.pooled && n_tiles > 0) {
    // Its keys' running max: of its last key tile, the one of its own indices (pooled_key_tile;
    // pools_on_chip), still in its stage until the epilogue's barrier below, carried from the
    // segment's rows before it, read again from k; written into ks. Out of the loop, whose every
    // tile would otherwise test for it.
    const int j0 = (n_tiles - 1) * N;
    ColumnMax<T, D> keys;
    if constexpr (!PACKED)
      keys.carry(j0, [&](int c) { return at<T>(p.k, b, h, row_of(p.key, g, c)); });
    T* pooled =
        static_cast<T*>(f.pooled_keys) + b * f.pooled_keys_stride[0] + h * f.pooled_keys_stride[1];
    keys.walk(
        ks + ((n_tiles - 1) & 1) * N * P,
        N,
        [&](int c) {
          if constexpr (PACKED)
            return tables.k_row(false, c) < 0 ? -1 : c % int(p.key.seg_len) == 0 ? 0 : 1;
          return j0 + c < a_count ? (j0 + c == 0 ? 0 : 1) : -1;
        },
        [&](int c) -> T* {
          const TileIndex k = PACKED ? packed_key(p, false, cta, c) : TileIndex{g, j0 + c, true};
          return pooled + row_of(p.pooled_keys, k.g, k.i) * f.pooled_keys_stride[2];
        });
  }
  if constexpr (!PACKED) {
    if (f.key_pool.segments > 0 && n_direct == 1 && g < f.key_pool.segments) {
      // Forward::key_pool: the segment's max over its keys, from its one key tile (key_pool_fits),
      // still in stage 0 until the epilogue's barrier below, a column a thread, as the segment max
      // kernel takes it. Out of the loop, whose every tile would otherwise test for it. (A
      // segment of more key tiles: after the epilogue, below.)
      const SegmentMax& m = f.key_pool;
      const int d = threadIdx.x;
      if (d < D) {
        float best = 0.f;
        for (int c = 0; c < a_count; ++c) {
          const float v = scalar_float(ks[c * P + d]);
          if (segment_max_takes(c, v, best)) best = v;
        }
        static_cast<T*>(m.y)[((b * m.heads + h) * m.segments + g) * m.dim + d] = scalar_as<T>(best);
      }
    }
  }
  // Epilogue: o / l and lse, or the log-sum-exp merge with what an earlier pass left, through
  // the staged tile (kernel_epilogue.cuh): row r of the tile is query t0 + r (packed: the
  // tables' query r).
  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
  const int64_t base = (b * p.heads + h) * p.query.limit;
  // This thread's row r's row of o and lse, or -1.
  auto query_row = [&](int r) -> int64_t {
    if constexpr (PACKED) return my_t[r] >= 0 ? row_of(p.query, g + my_seg[r], my_t[r]) : -1;
    const int t = tw + gq + 8 * r;
    return t < q_count ? row_of(p.query, g, t) : -1;
  };
  float* lse = static_cast<float*>(f.lse);
  float w[2] = {0.f, 0.f};       // o's accumulator rows times: 1 / l, or the merge's new weight
  float w_prev[2] = {0.f, 0.f};  // the merge's weight of what the row held
  bool writes[2] = {false, false};
  if (warp_active) {
    float prev2[2] = {0.f, 0.f};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = query_row(r);
      if (f.merge && row >= 0) prev2[r] = lse[base + row] * kLog2e;
    }
    __syncwarp();  // every lane has read lse before a quad's first lane rewrites it
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t at_row = query_row(r);
      if (at_row < 0) continue;
      const int64_t row = base + at_row;
      const float lse2 = l[r] > 0.f ? m[r] + log2f(l[r]) : -INFINITY;
      const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
      if (!f.merge) {
        w[r] = inv;
        writes[r] = true;
        if (qq == 0) lse[row] = lse2 * kLn2;
      } else if (l[r] > 0.f) {  // rows without terms keep the earlier pass's result
        const float top = fmaxf(prev2[r], lse2);
        const float total2 = top + log2f(exp2f(prev2[r] - top) + exp2f(lse2 - top));
        w_prev[r] = exp2f(prev2[r] - total2);
        w[r] = exp2f(lse2 - total2) * inv;
        writes[r] = true;
        if (qq == 0) lse[row] = total2 * kLn2;
      } else if (f.mean_with) {  // the mean of what the row holds
        w_prev[r] = 1.f;
        writes[r] = true;
      }
    }
  }
  float* tile = reinterpret_cast<float*>(smem);
  float* weight = tile + kStagedRows * stage_pitch<D>();        // w_prev per row
  int* written = reinterpret_cast<int*>(weight + kStagedRows);  // whether the row is written
  __syncthreads();  // every warp is done with Q, K and V: the tile reuses them
  if (warp_active) stage_rows<D>(tile, warp, o, w);
  if (qq == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      weight[16 * warp + gq + 8 * r] = w_prev[r];
      written[16 * warp + gq + 8 * r] = writes[r];
    }
  }
  __syncthreads();
  T* o_out = static_cast<T*>(f.o);
  write_rows<T, D>(
      tile,
      o_out,
      f.merge ? o_out : nullptr,
      weight,
      [&](int r) -> int64_t {
        if (!written[r]) return -1;
        if constexpr (PACKED)
          return output_at(f, b, h, row_of(p.query, g + tables.q_seg(r), tables.q_idx(r)));
        return output_at(f, b, h, row_of(p.query, g, t0 + r));
      },
      static_cast<const T*>(f.mean_with));
  if constexpr (!PACKED) {
    if (f.key_pool.segments > 0 && n_direct > 1 && g < f.key_pool.segments && t0 == 0) {
      // Forward::key_pool over a segment of more than one key tile, by its first query tile's
      // CTA: k's rows read again (its walk has just loaded them), once o's accumulators are
      // written and their registers free.
      const SegmentMax& m = f.key_pool;
      const int d = threadIdx.x;
      if (d < D) {
        const int step = int(m.stride[2]);  // rows of a head below 2^31 (checks.cpp)
        const T* x = static_cast<const T*>(m.x) + b * m.stride[0] + h * m.stride[1] +
                     g * m.len * m.stride[2] + d;
        float best = 0.f;
        for (int c = 0; c < a_count; ++c) {
          const float v = scalar_float(x[c * step]);
          if (segment_max_takes(c, v, best)) best = v;
        }
        static_cast<T*>(m.y)[((b * m.heads + h) * m.segments + g) * m.dim + d] = scalar_as<T>(best);
      }
    }
  }
}

// delta = sum_d dO * O per row. A row's D values are read by delta_lanes() lanes, one 16-byte
// piece each (8 bf16 or 4 floats), and summed across them by shuffles; each thread reads
// kDeltaPasses rows, kThreads / lanes apart, issuing all its loads before its first sum. A CTA's
// rows are delta_rows() consecutive rows of one (batch, head): grid (row blocks, B * H), so that
// the index's divisions are two 32-bit ones per thread. The delta kernel's CTA x is row block x;
// a forward that makes a delta (Forward::delta) runs the same CTAs after its pass's own.
constexpr int kDeltaPasses = 4;
template <typename T, int D>
__host__ __device__ constexpr int delta_lanes() {  // bf16 D 32 / 64 / 128: 4 / 8 / 16
  return D * int(sizeof(T)) / 16;
}
template <typename T, int D>
__host__ __device__ constexpr int delta_rows() {  // bf16 D 32 / 64 / 128: 128 / 64 / 32
  return kDeltaPasses * kThreads / delta_lanes<T, D>();
}
template <typename T, int D>
__host__ __device__ int64_t delta_ctas(const Delta& d) {
  return ceil_div(d.rows, int64_t(delta_rows<T, D>()));
}
template <typename T, int D>
__device__ __forceinline__ void delta_cta(const Delta& d, int64_t block) {
  constexpr int kLanes = delta_lanes<T, D>(), kVec = 16 / int(sizeof(T));
  constexpr int kApart = kThreads / kLanes;  // rows between a thread's passes
  const int bh = blockIdx.y, b = bh / int(d.heads), h = bh % int(d.heads);
  const int piece = threadIdx.x % kLanes;
  const int64_t r0 = block * delta_rows<T, D>() + threadIdx.x / kLanes;
  uint4 x[kDeltaPasses], y[kDeltaPasses];
#pragma unroll
  for (int i = 0; i < kDeltaPasses; ++i) {
    const int64_t r = r0 + i * kApart;
    x[i] = y[i] = make_uint4(0u, 0u, 0u, 0u);
    if (r < d.rows) {
      x[i] = *reinterpret_cast<const uint4*>(at<T>(d.o, b, h, r) + piece * kVec);
      y[i] = *reinterpret_cast<const uint4*>(at<T>(d.d_o, b, h, r) + piece * kVec);
    }
  }
  float* delta = static_cast<float*>(d.delta) + int64_t(bh) * d.rows;
#pragma unroll
  for (int i = 0; i < kDeltaPasses; ++i) {
    float o[kVec], d_o[kVec];
    to_floats(x[i], o);
    to_floats(y[i], d_o);
    const float sum = piece_dot<kLanes>(o, d_o);
    const int64_t r = r0 + i * kApart;
    if (piece == 0 && r < d.rows)
      delta[r] = own_delta(sum, d.other_delta, int64_t(bh) * d.rows + r);
  }
}
template <typename T, int D>
__global__ void __launch_bounds__(kThreads) delta_kernel(const Delta d) {
  delta_cta<T, D>(d, blockIdx.x);
}

template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, forward_blocks_per_sm<T, D>())
    forward_kernel(const Forward f) {
  if (f.delta.delta) {  // CTAs after the pass's make delta (Forward::delta)
    const int64_t block = int64_t(blockIdx.x) - query_ctas(f.pass);
    if (block >= 0) return delta_cta<T, D>(f.delta, block);
  }
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  forward_cta<T, D, PACKED>(f, smem);
}

// Two forward passes in one launch (kernel.h ForwardPair, pairable): CTA x runs the first's
// CTA x, then, after a barrier (the second's loads reuse the shared memory the first's epilogue
// staged in), the second's, whose q, k and v rows are among those the first has just loaded.
// Two inlined copies, each reading its pass from the kernel's parameters at fixed offsets: one
// copy reading it at the part's offset, as segment_pair_kernel does, issues a sixth more per key
// tile (bf16 D 64: 1,125 instructions against 950), each parameter a load where it was an operand.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, forward_blocks_per_sm<T, D>())
    forward_pair_kernel(const __grid_constant__ ForwardPair pair) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  forward_cta<T, D, PACKED, false>(pair.first, smem);
  if (blockIdx.x >= query_ctas(pair.second.pass)) return;
  __syncthreads();
  forward_cta<T, D, PACKED, false>(pair.second, smem);
}

}  // namespace combiner::attention::fused::cuda_detail

namespace combiner::attention::fused {

bool cuda_supports(Dtype dtype, int64_t dim) {
  return (dtype == Dtype::kFloat32 || dtype == Dtype::kBFloat16) &&
         (dim == 32 || dim == 64 || dim == 128);
}

void forward_cuda(const Forward& f, void* stream) {
  using namespace cuda_detail;
  dispatch(f.pass.dtype, f.pass.dim, "fused forward", [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    const Delta& d = f.delta;
    if (d.delta && (d.batch != f.pass.batch || d.heads != f.pass.heads || d.dtype != f.pass.dtype ||
                    d.dim != f.pass.dim))
      throw std::runtime_error("fused forward: a delta of another batch, heads, dtype or dim");
    if (f.key_pool.segments > 0 && !key_pool_fits(f.pass, f.key_pool, false))
      throw std::runtime_error("fused forward: a key pool its CTAs cannot make (key_pool_fits)");
    if (f.query_pool.segments > 0 && !query_pool_fits(f.pass, f.query_pool))
      throw std::runtime_error(
          "fused forward: a query pool its CTAs cannot make (query_pool_fits)");
    const int64_t ctas = query_ctas(f.pass) + (d.delta ? delta_ctas<T, D>(d) : 0);
    const dim3 grid(unsigned(ctas), unsigned(f.pass.batch * f.pass.heads));
    if (segment_pack(f.pass) > 1)
      launch(
          forward_kernel<T, D, true>, grid, forward_smem<T, D, true>(), stream, "fused forward", f);
    else
      launch(forward_kernel<T, D, false>,
             grid,
             forward_smem<T, D, false>(),
             stream,
             "fused forward",
             f);
  });
}

void forward_pair_cuda(const ForwardPair& pair, void* stream) {
  using namespace cuda_detail;
  if (!pairable(pair.first, pair.second))
    throw std::runtime_error(
        "fused forward (pair): the passes do not pair (kernel_plan.h pairable)");
  const SegmentMax& pool = pair.second.key_pool;
  if (pool.segments > 0 && !key_pool_fits(pair.second.pass, pool, false))
    throw std::runtime_error("fused forward (pair): a key pool its CTAs cannot make");
  static_assert(sizeof(ForwardPair) <= 4096, "a kernel parameter of at most 4 KB");
  const Pass& p = pair.first.pass;
  dispatch(p.dtype, p.dim, "fused forward (pair)", [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    const dim3 grid(unsigned(query_ctas(p)), unsigned(p.batch * p.heads));
    const char* what = "fused forward (two passes)";
    if (segment_pack(p) > 1)
      launch(forward_pair_kernel<T, D, true>, grid, forward_smem<T, D, true>(), stream, what, pair);
    else
      launch(
          forward_pair_kernel<T, D, false>, grid, forward_smem<T, D, false>(), stream, what, pair);
  });
}

void delta_cuda(const Delta& d, void* stream) {
  using namespace cuda_detail;
  dispatch(d.dtype, d.dim, "fused delta", [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    const dim3 grid(unsigned(delta_ctas<T, D>(d)), unsigned(d.batch * d.heads));
    launch(delta_kernel<T, D>, grid, 0, stream, "fused delta", d);
  });
}

}  // namespace combiner::attention::fused
