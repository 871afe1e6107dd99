// The fused backward, line for line the CPU model's backward_dq_tile and backward_dkv_tile
// (fused/kernel_cpu.cpp). Weights are recomputed from the saved log-sum-exp: P = exp2(S * scale
// * log2 e - lse * log2 e); dP = dO V^T; dS = P (dP - delta), delta = rowsum(dO * O).
//   dq kernel: one CTA per query tile (as the forward), dQ += dS K over the same key tiles.
//   dkv kernel: one CTA per 64-key tile; each warp owns 16 keys and computes S^T = K Q^T and
//   dP^T = V dO^T directly (no transposes), dV += P^T dO, dK += dS^T Q, walking the query tiles
//   that see its keys: its own segment's (source A, and source B by segment, in one launch), or
//   for a summary tile by prefix the queries of a run of later segments, whose partial sums are
//   added atomically (fp32).
// Shared memory (D = 32 / 64 / 128): dq bf16 30 / 54 / 102 KB, fp32 71 / 119 / 215 KB; dkv bf16
// 32 / 56 / 69 KB, fp32 73 / 121 / 142 KB (D = 128 walks 32-query tiles).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_tile.cuh"

namespace combiner::attention::fused::cuda_detail {

template <typename T, int D>
__host__ __device__ constexpr size_t dq_smem() {
  return size_t(2 * kQueryTile + 4 * kKeyTile) * pitch<T, D>() * sizeof(T) +
         size_t(kWarps) * scratch_floats<T, kKeyTile>() * sizeof(float);
}

template <typename T, int D>
__host__ __device__ constexpr size_t dkv_smem() {
  constexpr int MQ = backward_query_tile(D);
  return size_t(2 * kKeyTile + 4 * MQ) * pitch<T, D>() * sizeof(T) + 2 * 4 * MQ * sizeof(float) +
         size_t(kWarps) * scratch_floats<T, MQ>() * sizeof(float);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) dq_kernel(const Backward bw) {
  constexpr int P = pitch<T, D>(), M = kQueryTile, N = kKeyTile;
  static_assert(M == kStagedRows && staged_bytes<D>() <= dq_smem<T, D>(), "the epilogue's tile");
  extern __shared__ __align__(16) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + M * P;
  T* ks = dos + M * P;     // [2][N][P]
  T* vs = ks + 2 * N * P;  // [2][N][P]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(vs + 2 * N * P) + warp * scratch_floats<T, N>();

  const Pass& p = bw.pass;
  const int64_t chunks = query_chunks(p);
  const int64_t g = blockIdx.x / chunks, b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  const int q_count = int(valid_count(p.query, g)), t0 = int(blockIdx.x % chunks) * M;
  if (t0 >= q_count) return;
  const int rows = min(M, q_count - t0);
  const int a_count = int(valid_count(p.key, g));
  const int n_direct = int(ceil_div(direct_keys(p.mask, a_count, t0 + rows - 1), N));
  const int s_count = int(summary_keys(p, g, t0 + rows - 1));
  const int n_tiles = n_direct + int(ceil_div(s_count, N));

  const T* q0 = at<T>(p.q, b, h, 0);
  const T* do0 = at<T>(bw.d_o, b, h, 0);
  const T* k0 = at<T>(p.k, b, h, 0);
  const T* v0 = at<T>(p.v, b, h, 0);
  auto query_row = [&](const T* base, int64_t stride) {
    return [=](int r) -> const T* {
      return t0 + r < q_count ? base + row_of(p.query, g, t0 + r) * stride : nullptr;
    };
  };
  load_rows<T, D, M>(qs, query_row(q0, p.q.row), q0);
  load_rows<T, D, M>(dos, query_row(do0, bw.d_o.row), do0);
  // Key tile `tile` into stage `stage`: source A's tiles first, then source B's.
  auto load_keys = [&](int tile, int stage) {
    const bool summary = tile >= n_direct;
    const SourceRows<T> src =
        summary ? source_b_rows<T>(p, b, h, g, s_count) : source_a_rows<T>(p, b, h, g, a_count);
    const int j0 = (summary ? tile - n_direct : tile) * N;
    load_rows<T, D, N>(
        ks + stage * N * P, [&](int c) { return src.key(j0 + c); }, k0);
    load_rows<T, D, N>(
        vs + stage * N * P, [&](int c) { return src.value(j0 + c); }, v0);
  };
  if (n_tiles > 0) load_keys(0, 0);
  cp_async_commit();

  const int tw = t0 + warp * 16;
  const bool warp_active = tw < q_count;
  const int64_t base = (b * p.heads + h) * p.query.limit;
  float lse2[2] = {0.f, 0.f}, delta[2] = {0.f, 0.f};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = tw + gq + 8 * r;
    if (t >= q_count) continue;
    const int64_t row = base + row_of(p.query, g, t);
    lse2[r] = static_cast<const float*>(bw.lse)[row] * kLog2e;
    delta[r] = static_cast<const float*>(bw.delta)[row];
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
    const bool skip = !warp_active || may_skip(mask, tw + 15, j0);
    if (!skip) {
      float s[N / 8][4], dp[N / 8][4];
      warp_nt<D, N>(s, qs + warp * 16 * P, ks + stage * N * P, scratch);
      warp_nt<D, N>(dp, dos + warp * 16 * P, vs + stage * N * P, scratch);
#pragma unroll
      for (int i = 0; i < N / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int t = tw + gq + 8 * (e / 2), j = j0 + i * 8 + 2 * qq + (e & 1);
          const bool ok = t < q_count && j < count && mask_allows(mask, t, j);
          const float w = ok ? exp2f(s[i][e] * scale2 - lse2[e / 2]) : 0.f;
          s[i][e] = w * (dp[i][e] - delta[e / 2]);  // dS
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
                         return t0 + r < q_count ? grad_at(bw.dq, b, h, row_of(p.query, g, t0 + r))
                                                 : -1;
                       });
}

// The keys a dk/dv CTA owns: a tile of source A's keys of one segment, of source B's by
// segment, or of the summaries by prefix (read by the queries of every later segment).
enum class Keys { kSourceA, kSegmentSummaries, kPrefixSummaries };

// One dk/dv CTA: `cta` numbers the CTAs of its kind of keys (segment g, key tile) or, by prefix,
// (summary tile, part).
template <typename T, int D, Keys KEYS>
__device__ __forceinline__ void dkv_tile(const Backward& bw, int64_t cta, unsigned char* smem) {
  constexpr int P = pitch<T, D>(), N = kKeyTile, MQ = backward_query_tile(D);
  constexpr bool A = KEYS == Keys::kSourceA, SUMMARY = KEYS == Keys::kPrefixSummaries;
  static_assert(N == kStagedRows && staged_bytes<D>() <= dkv_smem<T, D>(), "the epilogue's tile");
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + N * P;
  T* qs = vs + N * P;                                        // [2][MQ][P]
  T* dos = qs + 2 * MQ * P;                                  // [2][MQ][P]
  float* lses = reinterpret_cast<float*>(dos + 2 * MQ * P);  // [2][MQ], natural log
  float* deltas = lses + 2 * MQ;                             // [2][MQ]
  int* seen = reinterpret_cast<int*>(deltas + 2 * MQ);       // [2][MQ]
  int* rows = seen + 2 * MQ;                                 // [2][MQ]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(rows + 2 * MQ) + warp * scratch_floats<T, MQ>();

  const Pass& p = bw.pass;
  const Mask mask = A ? p.mask : p.summary_mask;
  const int64_t b = blockIdx.y / p.heads, h = blockIdx.y % p.heads;
  int64_t g = 0, f_begin = 0, f_end = 0;
  int j0 = 0, key_count = 0;
  if (SUMMARY) {
    const int64_t parts = ceil_div(p.query.segments, segments_per_part(p));
    const int64_t per = segments_per_part(p), part = cta % parts;
    j0 = int(cta / parts) * N;
    key_count = int(p.summary_count);
    const int64_t g_lo = max(part * per, int64_t(j0) + 1);
    const int64_t g_hi = min((part + 1) * per, p.query.segments);
    if (g_hi <= g_lo || j0 >= key_count) return;  // atomic outputs: nothing to add
    f_begin = g_lo * p.query.seg_len;
    f_end = g_hi * p.query.seg_len;
  } else {
    const int64_t tiles = ceil_div(A ? p.key.seg_len : p.summary_key.seg_len, N);
    g = cta / tiles;
    j0 = int(cta % tiles) * N;
    key_count = int(A ? valid_count(p.key, g) : summary_terms(p, g));
    if (j0 >= key_count) return;
    f_begin = first_query_tile(mask, j0, MQ);
    f_end = valid_count(p.query, g);
  }
  const T* q0 = at<T>(p.q, b, h, 0);
  const T* do0 = at<T>(bw.d_o, b, h, 0);
  const T* k0 = at<T>(A ? p.k : p.ks, b, h, 0);
  const T* v0 = at<T>(A ? p.v : p.u, b, h, 0);
  const int64_t k_row = A ? p.k.row : p.ks.row, v_row = A ? p.v.row : p.u.row;
  auto key_row = [&](int j) { return A ? row_of(p.key, g, j) : summary_key_row(p, g, j); };
  auto value_row = [&](int j) { return A ? row_of(p.value, g, j) : summary_value_row(p, g, j); };
  load_rows<T, D, N>(
      ks,
      [&](int c) -> const T* {
        return j0 + c < key_count ? k0 + key_row(j0 + c) * k_row : nullptr;
      },
      k0);
  load_rows<T, D, N>(
      vs,
      [&](int c) -> const T* {
        return j0 + c < key_count ? v0 + value_row(j0 + c) * v_row : nullptr;
      },
      v0);
  // Query tile at flat index f0 into stage `stage`, all asynchronous: per query once (not per
  // 16-byte chunk) its row (-1 if none), lse and delta by cp.async and `seen` (source A: its
  // index t, -1 if none; by prefix: how many summaries it sees); then the rows of q and dO.
  const float* lse0 = static_cast<const float*>(bw.lse) + (b * p.heads + h) * p.query.limit;
  const float* delta0 = static_cast<const float*>(bw.delta) + (b * p.heads + h) * p.query.limit;
  auto load_queries = [&](int64_t f0, int stage) {
    for (int i = threadIdx.x; i < MQ; i += kThreads) {
      const int64_t f = f0 + i;
      const int64_t gi = SUMMARY ? f / p.query.seg_len : g;
      const int64_t t = SUMMARY ? f % p.query.seg_len : f;
      const bool valid = f < f_end && t < valid_count(p.query, gi);
      const int64_t row = valid ? row_of(p.query, gi, t) : 0;
      rows[stage * MQ + i] = valid ? int(row) : -1;
      cp_async4(lses + stage * MQ + i, lse0 + row, valid);
      cp_async4(deltas + stage * MQ + i, delta0 + row, valid);
      seen[stage * MQ + i] =
          SUMMARY ? (valid ? int(summary_terms(p, gi)) : 0) : (valid ? int(t) : -1);
    }
    __syncthreads();  // every thread reads the rows below
    auto rows_of = [&](const T* x0, int64_t stride) {
      return [=](int i) -> const T* {
        const int row = rows[stage * MQ + i];
        return row >= 0 ? x0 + int64_t(row) * stride : nullptr;
      };
    };
    load_rows<T, D, MQ>(qs + stage * MQ * P, rows_of(q0, p.q.row), q0);
    load_rows<T, D, MQ>(dos + stage * MQ * P, rows_of(do0, bw.d_o.row), do0);
  };
  const int n_tiles = f_end > f_begin ? int(ceil_div(f_end - f_begin, MQ)) : 0;
  if (n_tiles > 0) load_queries(f_begin, 0);
  cp_async_commit();

  const int jw = j0 + warp * 16;  // this warp's first key
  const bool warp_active = jw < key_count;
  const float scale2 = float(p.scale) * kLog2e;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.f;

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
    // By segment: a warp none of whose keys a query of the tile sees skips it (causal masks).
    const bool skip = !warp_active || (!SUMMARY && may_skip(mask, f0 + MQ - 1, jw));
    if (!skip) {
      const T* qt = qs + stage * MQ * P;
      const T* dot = dos + stage * MQ * P;
      float s[MQ / 8][4], dp[MQ / 8][4];
      warp_nt<D, MQ>(s, ks + warp * 16 * P, qt, scratch);    // S^T: keys x queries
      warp_nt<D, MQ>(dp, vs + warp * 16 * P, dot, scratch);  // dP^T
#pragma unroll
      for (int i = 0; i < MQ / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = jw + gq + 8 * (e / 2), c = i * 8 + 2 * qq + (e & 1);
          const int info = seen[stage * MQ + c];
          const bool ok =
              j < key_count && (SUMMARY ? j < info : info >= 0 && mask_allows(mask, info, j));
          const float w = ok ? exp2f(s[i][e] * scale2 - lses[stage * MQ + c] * kLog2e) : 0.f;
          s[i][e] = w;                                         // P^T
          dp[i][e] = w * (dp[i][e] - deltas[stage * MQ + c]);  // dS^T
        }
      warp_nn<D, MQ>(dv, s, dot, scratch);
      warp_nn<D, MQ>(dk, dp, qt, scratch);
    }
    __syncthreads();
  }

  cp_async_wait<0>();
  const GradOut& out_k = A ? bw.dk : bw.dks;
  const GradOut& out_v = A ? bw.dv : bw.du;
  float* tile = reinterpret_cast<float*>(smem);
  write_gradient<T, D>(tile, out_k, dk, float(p.scale), warp_active, [&](int c) -> int64_t {
    const int j = j0 + c;
    if (j >= key_count) return -1;
    return grad_at(out_k, b, h, key_row(j) + (A ? g * out_k.segment_rows : 0));
  });
  write_gradient<T, D>(tile, out_v, dv, 1.f, warp_active, [&](int c) -> int64_t {
    const int j = j0 + c;
    if (j >= key_count) return -1;
    return grad_at(out_v, b, h, value_row(j) + (A ? g * out_v.segment_rows : 0));
  });
}

// The dk/dv walk of a pass in one launch: source A's key tiles, then source B's by segment.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) dkv_kernel(const __grid_constant__ Backward bw) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t a_ctas = key_tiles(bw.pass.key);
  if (blockIdx.x < a_ctas)
    dkv_tile<T, D, Keys::kSourceA>(bw, blockIdx.x, smem);
  else
    dkv_tile<T, D, Keys::kSegmentSummaries>(bw, blockIdx.x - a_ctas, smem);
}

// The summaries' dk/dv walk (by prefix): CTA (summary tile, part).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_summary_kernel(const __grid_constant__ Backward bw) {
  extern __shared__ __align__(16) unsigned char smem[];
  dkv_tile<T, D, Keys::kPrefixSummaries>(bw, blockIdx.x, smem);
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
    // dk, dv first: they read d_o, which dq may overwrite in place (Backward in kernel.h).
    launch(dkv_kernel<T, D>,
           dim3(unsigned(dkv_ctas(p)), heads),
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
    launch(dq_kernel<T, D>,
           dim3(unsigned(p.query.segments * query_chunks(p)), heads),
           dq_smem<T, D>(),
           stream,
           "fused backward (dq)",
           bw);
  });
}

}  // namespace combiner::attention::fused
