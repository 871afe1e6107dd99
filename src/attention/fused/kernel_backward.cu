// The fused backward, line for line the CPU model's backward_dq_tile and backward_dkv_tile
// (fused/kernel_cpu.cpp). Weights are recomputed from the saved log-sum-exp: P = exp2(S * scale
// * log2 e - lse * log2 e); dP = dO V^T; dS = P (dP - delta), delta = rowsum(dO * O).
//   dq kernel: one CTA per query tile (as the forward), dQ += dS K over the same key tiles.
//   dkv kernel: one CTA per 64-key tile (a segment's, or a pack group's keys of short segments,
//   kernel.h segment_pack, whose queries it walks); each warp owns 16 keys and computes S^T = K Q^T
//   and dP^T = V dO^T directly (no transposes), dV += P^T dO, dK += dS^T Q, walking the query tiles
//   that see its keys: its own segment's (source A, and source B by segment, in one launch), or
//   for a summary tile by prefix the queries of a run of later segments, whose partial sums are
//   added atomically (fp32).
//   segment kernel (kernel.h segment_backward: every segment one query tile and one key tile
//   per source): one CTA per segment runs the dk/dv walk of its source A keys, then of its
//   source B keys, and from the same dS^T, stored transposed, adds dS K into its dq: one launch,
//   q, dO, k and v read once, the scores computed once. The CPU model runs that CTA's dk/dv tiles
//   and its dq tile in turn.
// Shared memory (D = 32 / 64 / 128): dq bf16 30 / 54 / 102 KB, fp32 71 / 119 / 215 KB (packed:
// 2 KB more); dkv bf16 33 / 57 / 70 KB, fp32 74 / 122 / 143 KB (D = 128 walks 32-query
// tiles).

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_tile.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

// Q and dO, K and V (two stages) and the fp32 path's scratch.
template <typename T, int D>
__host__ __device__ constexpr size_t dq_tile_bytes() {
  return size_t(2 * kQueryTile + 4 * kKeyTile) * pitch<T, D>() * sizeof(T) +
         size_t(kWarps) * scratch_floats<T, kKeyTile>() * sizeof(float);
}
template <typename T, int D, bool PACKED>
__host__ __device__ constexpr size_t dq_smem() {
  return dq_tile_bytes<T, D>() + (PACKED ? packed_table_bytes(kQueryTile, kKeyTile) : 0);
}

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
// The one-CTA-per-segment backward (segment_backward in kernel.h) adds, after the dk/dv walk's:
// dS of the walk's query tiles (up to kQueryTile rows) against the key tile, [kQueryTile][kDsPitch]
// fp32 (for the fp32 path also each warp's scratch of the dq product); with two sources (D <= 64)
// the dq of the first, [kQueryTile][D + 4] fp32, until the second's is added. bf16 D = 32 / 64 /
// 128: 59 / 91 / 87 KB; fp32 D = 32 / 64: 100 / 156 KB (not built at D 128:
// kernel.h segment_backward_built).
constexpr int kDsPitch = kKeyTile + 4;
template <typename T, int D>
__host__ __device__ constexpr size_t segment_smem() {
  return dkv_smem<T, D>() + size_t(kQueryTile) * kDsPitch * sizeof(float) +
         (D <= 64 ? size_t(kQueryTile) * (D + 4) * sizeof(float) : 0);
}

// CTAs per SM the dq kernel is built for: three for bf16 up to D 64 (at most 168 registers a
// thread), else two. Stated, not left to ptxas's guess, which for some packed instances aimed at
// one more CTA than their registers allow, and spilled.
template <typename T, int D>
__host__ __device__ constexpr int dq_blocks_per_sm() {
  return sizeof(T) == 2 && D <= 64 ? 3 : 2;
}

// As the forward: PACKED, a pack group's tile through the index tables.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, dq_blocks_per_sm<T, D>()) dq_kernel(const Backward bw) {
  constexpr int P = pitch<T, D>(), M = kQueryTile, N = kKeyTile;
  static_assert(M == kStagedRows && staged_bytes<D>() <= dq_tile_bytes<T, D>(),
                "the epilogue's tile (the index tables after it survive it)");
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + M * P;
  T* ks = dos + M * P;     // [2][N][P]
  T* vs = ks + 2 * N * P;  // [2][N][P]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(vs + 2 * N * P) + warp * scratch_floats<T, N>();
  const PackedTables<M, N> tables(smem + dq_tile_bytes<T, D>());

  const Pass& p = bw.pass;
  const int64_t cta = blockIdx.x, b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int64_t chunks = query_chunks(p);
  const int64_t g = PACKED ? cta * segment_pack(p) : cta / chunks;
  const int q_count = PACKED ? M : int(valid_count(p.query, g));
  const int t0 = PACKED ? 0 : int(cta % chunks) * M;
  if (t0 >= q_count) return;
  const int rows = min(M, q_count - t0);
  const int a_count = PACKED ? 0 : int(valid_count(p.key, g));
  const QueryTileKeys n = query_tile_keys(p, cta);
  const int n_direct = int(n.direct), n_tiles = int(n.total);
  const int s_count = PACKED ? 0 : int(summary_keys(p, g, t0 + rows - 1));
  if constexpr (PACKED) tables.fill(p, cta, g);  // then synchronised

  const T* q0 = at<T>(p.q, b, h, 0);
  const T* do0 = at<T>(bw.d_o, b, h, 0);
  const T* k0 = at<T>(p.k, b, h, 0);
  const T* v0 = at<T>(p.v, b, h, 0);
  // Tile row r's row of the query tensors, or -1.
  auto query_row = [&](int r) -> int64_t {
    if constexpr (PACKED)
      return tables.q_idx(r) >= 0 ? row_of(p.query, g + tables.q_seg(r), tables.q_idx(r)) : -1;
    return t0 + r < q_count ? row_of(p.query, g, t0 + r) : -1;
  };
  auto rows_of = [&](const T* base, int64_t stride) {
    return [=](int r) -> const T* {
      const int64_t row = query_row(r);
      return row >= 0 ? base + row * stride : nullptr;
    };
  };
  load_rows<T, D, M>(qs, rows_of(q0, p.q.row), q0);
  load_rows<T, D, M>(dos, rows_of(do0, bw.d_o.row), do0);
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

  const int tw = t0 + warp * 16;
  int my_seg[2] = {0, 0}, my_t[2] = {-1, -1};  // packed: this thread's rows' segment and index
  if constexpr (PACKED) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      my_seg[r] = tables.q_seg(warp * 16 + gq + 8 * r);
      my_t[r] = tables.q_idx(warp * 16 + gq + 8 * r);
    }
  }
  const bool warp_active =
      PACKED ? __any_sync(0xffffffffu, my_t[0] >= 0 || my_t[1] >= 0) : tw < q_count;
  const int64_t base = (b * p.heads + h) * p.query.limit;
  float lse2[2] = {0.f, 0.f}, delta[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = query_row(warp * 16 + gq + 8 * r);
    if (row < 0) continue;
    lse2[r] = static_cast<const float*>(bw.lse)[base + row] * kLog2e;
    delta[r] = static_cast<const float*>(bw.delta)[base + row];
  }
  const float scale2 = float(p.scale) * kLog2e;
  float dq[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.f;

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
    const bool skip = !warp_active || (!PACKED && may_skip(mask, tw + 15, j0));
    if (!skip) {
      float s[N / 8][4], dp[N / 8][4];
      warp_nt<D, N>(s, qs + warp * 16 * P, ks + stage * N * P, scratch);
      warp_nt<D, N>(dp, dos + warp * 16 * P, vs + stage * N * P, scratch);
      // Row by row (one row's set live at a time): the keys of the tile it sees, from this
      // thread's first column (kernel.h Visible), and its dS.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = tw + gq + 8 * r;
        Visible sees;
        if constexpr (PACKED)
          sees = tables.keys_seen_by(p, warp * 16 + gq + 8 * r, summary, mask, 2 * qq);
        else
          sees = t < q_count ? from(keys_seen(mask, t, count), j0 + 2 * qq) : Visible{};
#pragma unroll
        for (int i = 0; i < N / 8; ++i)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            const int c = i * 8 + (e & 1);
            const bool ok = PACKED ? visible(sees, c) : visible_in_prefix(sees, c);
            const float w = ok ? exp2_ftz(fmaf(s[i][e], scale2, -lse2[r])) : 0.f;
            s[i][e] = w * (dp[i][e] - delta[r]);  // dS
          }
      }
      warp_nn<D, N>(dq, s, ks + stage * N * P, scratch);
    }
    __syncthreads();
  }

  cp_async_wait<0>();
  write_gradient<T, D>(reinterpret_cast<float*>(smem),
                       bw.dq,
                       dq,
                       float(p.scale),
                       warp_active,
                       [&](int r) -> int64_t {
                         const int64_t row = query_row(r);
                         return row >= 0 ? grad_at(bw.dq, b, h, row) : -1;
                       });
}

// One dk/dv CTA: `cta` numbers the CTAs of its kind of keys (segment g, key tile; PACKED, a pack
// group's keys, kernel.h dkv_key) or, by prefix, (summary tile, part).
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
  static_assert(!DQ || (staged_bytes<D>() <= size_t(4 * MQ) * P * sizeof(T) && !SUMMARY),
                "DQ: dk and dv staged in the query tiles' memory, the keys kept for dS K");
  [[maybe_unused]] float* ds = reinterpret_cast<float*>(smem + dkv_smem<T, D>());

  const Pass& p = bw.pass;
  const Mask mask = A ? p.mask : p.summary_mask;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  int64_t g = 0, f_begin = 0, f_end = 0;
  int j0 = 0, key_count = 0;
  if constexpr (SUMMARY) {
    const int64_t parts = ceil_div(p.query.segments, segments_per_part(p));
    const int64_t per = segments_per_part(p), part = cta % parts;
    j0 = int(cta / parts) * N;
    key_count = int(p.summary_count);
    const int64_t g_lo = max(part * per, int64_t(j0) + 1);
    const int64_t g_hi = min((part + 1) * per, p.query.segments);
    if (g_hi <= g_lo || j0 >= key_count) return false;  // atomic outputs: nothing to add
    f_begin = g_lo * p.query.seg_len;
    f_end = g_hi * p.query.seg_len;
  } else if constexpr (PACKED) {
    // The group's keys by table (its first segment g: k_seg is relative to it); every query of
    // its segments, as flat indices f (kernel.h packed_query), its row in `rows` (-1: none),
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
    g = cta / tiles;
    j0 = int(cta % tiles) * N;
    key_count = int(A ? valid_count(p.key, g) : summary_terms(p, g));
    if (j0 >= key_count) return false;
    f_begin = first_query_tile(mask, j0, MQ);
    f_end = valid_count(p.query, g);
  }
  // q's rows lie query_source_shift rows from the queries' (a pooled pass's: kernel.h); q_any is a
  // valid address for the copies that load nothing.
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
  auto load_queries = [&](int64_t f0, int stage) {
    if constexpr (!PACKED && !SUMMARY) {
      // By segment: query f is row f of segment g, its rows row_stride apart.
      const int64_t start = row_of(p.query, g, 0), step = p.query.row_stride;
      for (int i = threadIdx.x; i < MQ; i += kThreads) {
        const bool valid = f0 + i < f_end;
        const int64_t row = valid ? start + (f0 + i) * step : 0;
        cp_async4(lses + stage * MQ + i, lse0 + row, valid);
        cp_async4(deltas + stage * MQ + i, delta0 + row, valid);
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
        cp_async4(deltas + stage * MQ + i, delta0 + max(row, 0), row >= 0);
      }
    } else {  // by prefix: the queries of a run of segments
      for (int i = threadIdx.x; i < MQ; i += kThreads) {
        const int64_t f = f0 + i;
        TileIndex q;
        q.g = f / p.query.seg_len;
        q.i = f % p.query.seg_len;
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
    if constexpr (A) {
      if (p.pooled) {
        // kernel.h Pass::pooled: the tile's queries become their running max down the segment,
        // continued from the walk's earlier tile (f_begin = 0, one segment or pack group).
        T* qt = qs + stage * MQ * P;
        pooled.walk(
            qt,
            MQ,
            [&](int i) {
              const int64_t f = f0 + i;
              if constexpr (PACKED)
                return f < f_end && rows[f] >= 0 ? (f % p.query.seg_len == 0 ? 0 : 1) : -1;
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
      // (kernel.h Visible); packed, its keys' own segments' queries, f = seg x seg_len + t.
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
  float* tile = reinterpret_cast<float*>(DQ ? reinterpret_cast<unsigned char*>(qs) : smem);
  write_gradient<T, D>(tile, out_k, dk, float(p.scale), warp_active, [&](int c) -> int64_t {
    if (key_idx(c) < 0) return -1;
    return grad_at(out_k, b, h, key_row(c) + (A ? key_seg(c) * out_k.segment_rows : 0));
  });
  write_gradient<T, D>(tile, out_v, dv, 1.f, warp_active, [&](int c) -> int64_t {
    if (key_idx(c) < 0) return -1;
    return grad_at(out_v, b, h, value_row(c) + (A ? key_seg(c) * out_v.segment_rows : 0));
  });
  return n_tiles > 0;
}

// The dk/dv walk of a pass in one launch: source A's key tiles, then source B's by segment.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1) dkv_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  const int64_t a_ctas = key_ctas(bw.pass, false);
  if (blockIdx.x < a_ctas)
    dkv_tile<T, D, Keys::kSourceA, PACKED>(bw, blockIdx.x, smem);
  else
    dkv_tile<T, D, Keys::kSegmentSummaries, PACKED>(bw, blockIdx.x - a_ctas, smem);
}

// One warp's 16 rows (16 warp + ...) of dS K: dS as the walk stored it, K the key tile the walk
// left in shared memory.
template <typename T, int D>
__device__ __forceinline__ void add_ds_times_k(float (&dq)[D / 8][4], float* ds, const T* ks) {
  constexpr int N = kKeyTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* rows = ds + warp * 16 * kDsPitch;
  float d_s[N / 8][4];
#pragma unroll
  for (int i = 0; i < N / 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      d_s[i][e] = rows[(gq + 8 * (e / 2)) * kDsPitch + i * 8 + 2 * qq + (e & 1)];
  warp_nn<D, N>(dq, d_s, ks, rows);  // fp32: its scratch is these rows, the same values
}

// A pooled pass's pools' backward in its segment CTA's epilogue (kernel.h Backward::pools_dq):
// the queries' gradient (the accumulators, scaled and rounded to T as dq would be stored) and
// d_pooled_keys through the running maxes of q and k, down each of the CTA's segments, added
// into pools_dq and dk (whose rows of these keys the walk has written). In the walk's shared
// memory: the keys as loaded (still in their tile), d_pooled_keys' rows in the value tile's, q's
// rows in the query tiles', the gradient in the d_o tiles'; one thread per element of a row
// walks each segment's rows in turn (RunningMax's backward with `accumulate`).
template <typename T, int D>
__device__ __forceinline__ void pools_backward(const Backward& bw,
                                               const float (&dq)[D / 8][4],
                                               bool active,
                                               unsigned char* smem) {
  constexpr int P = pitch<T, D>(), N = kKeyTile, MQ = backward_query_tile(D), M = kQueryTile;
  static_assert(2 * MQ >= M, "a query tile's rows fit two walk tiles");
  const Pass& p = bw.pass;
  const int64_t cta = blockIdx.x, b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  T* keys = reinterpret_cast<T*>(smem);  // dkv_tile's layout
  T* d_keys = keys + N * P;
  T* queries = d_keys + N * P;
  T* d_queries = queries + 2 * MQ * P;
  __syncthreads();  // every warp is done with the walk's staging (in the query tiles)
  const T* q0 = at<T>(p.q, b, h, 0);
  const T* dks0 = at<T>(bw.d_pooled_keys, b, h, 0);
  load_rows<T, D, M>(
      queries,
      [&](int r) -> const T* {
        const TileIndex q = tile_query(p, cta, r);
        return q.valid ? q0 + query_source_row(p, q.g, q.i) * p.q.row : nullptr;
      },
      q0);
  load_rows<T, D, N>(
      d_keys,
      [&](int c) -> const T* {
        const TileIndex k = dkv_key(p, false, cta, c);
        return k.valid ? dks0 + row_of(p.pooled_keys, k.g, k.i) * bw.d_pooled_keys.row : nullptr;
      },
      dks0);
  cp_async_commit();
  if (active) {
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        d_queries[(16 * warp + gq + 8 * (e / 2)) * P + dt * 8 + 2 * qq + (e & 1)] =
            scalar_as<T>(dq[dt][e] * float(p.scale));
  }
  cp_async_wait<0>();
  __syncthreads();
  const int d = threadIdx.x;
  if (d >= D) return;
  // Rows 0..count-1 of the tiles x and dy, index(r) naming each (its segment and step); dx in
  // global memory (kStore: the pass dtype), its rows by `rows`.
  const auto walk =
      [&](int count, auto index, const T* x, const T* dy, const GradOut& dx, const Geometry& rows) {
        T* out = static_cast<T*>(dx.data) + grad_at(dx, b, h, 0) + d;
        const auto add = [&](const TileIndex& step, float sum) {
          T* e = out + row_of(rows, step.g, step.i) * dx.stride[2];
          *e = scalar_as<T>(scalar_float(*e) + sum);
        };
        float best = 0.f, sum = 0.f;
        TileIndex held;  // the step holding the running max
        for (int r = 0; r < count; ++r) {
          const TileIndex step = index(r);
          if (!step.valid) continue;
          const float v = scalar_float(x[r * P + d]);
          if (running_max_takes(step.i, v, best)) {
            if (step.i > 0) add(held, sum);
            best = v;
            held = step;
            sum = 0.f;
          }
          sum += scalar_float(dy[r * P + d]);
          const TileIndex next = r + 1 < count ? index(r + 1) : TileIndex{};
          if (!next.valid || next.g != step.g) add(held, sum);  // the segment's last step
        }
      };
  walk(
      M,
      [&](int r) { return tile_query(p, cta, r); },
      queries,
      d_queries,
      bw.pools_dq,
      p.pooled_query);
  walk(
      N, [&](int c) { return dkv_key(p, false, cta, c); }, keys, d_keys, bw.dk, p.key);
}

// A segment_backward pass (kernel.h): one CTA per segment or pack group (as the query CTAs) runs
// the dk/dv walk of its keys of source A, then of source B by segment, and after each adds dS K
// into its dq (kept in shared memory while B's walk runs), which it writes last: the queries'
// d_o rows are read by this CTA alone, so dq may overwrite them. A segment with no key of a
// source adds nothing for it; its dq is still written (an empty buffer's first writer).
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1)
    segment_backward_kernel(const __grid_constant__ Backward bw) {
  constexpr int QP = D + 4;
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  const T* ks = reinterpret_cast<const T*>(smem);  // the walk's key tile (dkv_tile's layout)
  float* ds = reinterpret_cast<float*>(smem + dkv_smem<T, D>());
  [[maybe_unused]] float* first = ds + kQueryTile * kDsPitch;  // two sources: A's dq [64][QP]
  const Pass& p = bw.pass;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  // The walk's query rows: a pack group's, or the segment's (at most kQueryTile).
  const int64_t pack = segment_pack(p);
  const int q_rows = int(pack > 1 ? pack * p.query.seg_len : valid_count(p.query, blockIdx.x));
  const bool active = warp * 16 < q_rows;
  float dq[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.f;
  if (dkv_tile<T, D, Keys::kSourceA, PACKED, true>(bw, blockIdx.x, smem) && active)
    add_ds_times_k<T, D>(dq, ds, ks);
  if constexpr (D <= 64) {
    if (p.summaries) {
      float* rows = first + warp * 16 * QP;
      if (active) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            rows[(gq + 8 * (e / 2)) * QP + dt * 8 + 2 * qq + (e & 1)] = dq[dt][e];
      }
      __syncthreads();  // source A's dS K has read the keys and dS before B's walk rewrites them
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.f;
      if (dkv_tile<T, D, Keys::kSegmentSummaries, PACKED, true>(bw, blockIdx.x, smem) && active)
        add_ds_times_k<T, D>(dq, ds, ks);
      if (active) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            dq[dt][e] += rows[(gq + 8 * (e / 2)) * QP + dt * 8 + 2 * qq + (e & 1)];
      }
    }
  }
  if (bw.pools_dq.kind != GradOut::kNone) {
    pools_backward<T, D>(bw, dq, active, smem);
    return;
  }
  write_gradient<T, D>(
      reinterpret_cast<float*>(smem), bw.dq, dq, float(p.scale), active, [&](int r) -> int64_t {
        const TileIndex q = tile_query(p, blockIdx.x, r);
        return q.valid ? grad_at(bw.dq, b, h, row_of(p.query, q.g, q.i)) : -1;
      });
}

// The summaries' dk/dv walk (by prefix): CTA (summary tile, part).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_summary_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  dkv_tile<T, D, Keys::kPrefixSummaries, false>(bw, blockIdx.x, smem);
}

}  // namespace combiner::attention::fused::cuda_detail

namespace combiner::attention::fused {

void backward_cuda(const Backward& bw, void* stream) {
  using namespace cuda_detail;
  const Pass& p = bw.pass;
  dispatch(p.dtype, p.dim, "fused backward", [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    const unsigned heads = unsigned(p.batch * p.heads);
    const bool packed = segment_pack(p) > 1;
    constexpr Dtype dtype = sizeof(T) == 4 ? Dtype::kFloat32 : Dtype::kBFloat16;
    if constexpr (segment_backward_built(dtype, D)) {
      if (segment_backward(p)) {
        const dim3 grid(unsigned(query_ctas(p)), heads);
        const char* what = "fused backward (one CTA per segment)";
        if (packed)
          launch(segment_backward_kernel<T, D, true>, grid, segment_smem<T, D>(), stream, what, bw);
        else
          launch(
              segment_backward_kernel<T, D, false>, grid, segment_smem<T, D>(), stream, what, bw);
        return;
      }
    }
    // dk, dv first: they read d_o, which dq may overwrite in place (Backward in kernel.h).
    const dim3 dkv_grid(unsigned(dkv_ctas(p)), heads);
    if (packed)
      launch(dkv_kernel<T, D, true>,
             dkv_grid,
             dkv_smem<T, D>(),
             stream,
             "fused backward (dk, dv)",
             bw);
    else
      launch(dkv_kernel<T, D, false>,
             dkv_grid,
             dkv_smem<T, D>(),
             stream,
             "fused backward (dk, dv)",
             bw);
    if (backward_launches(bw) == 3)
      launch(dkv_summary_kernel<T, D>,
             dim3(unsigned(ceil_div(p.summary_count, kKeyTile) *
                           ceil_div(p.query.segments, segments_per_part(p))),
                  heads),
             dkv_smem<T, D>(),
             stream,
             "fused backward (d summaries)",
             bw);
    const dim3 dq_grid(unsigned(query_ctas(p)), heads);
    if (packed)
      launch(
          dq_kernel<T, D, true>, dq_grid, dq_smem<T, D, true>(), stream, "fused backward (dq)", bw);
    else
      launch(dq_kernel<T, D, false>,
             dq_grid,
             dq_smem<T, D, false>(),
             stream,
             "fused backward (dq)",
             bw);
  });
}

}  // namespace combiner::attention::fused
