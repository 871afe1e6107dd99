// The one-CTA-per-segment backward (kernel_plan.h segment_backward), included by
// kernel_backward.cu: the CTA of a segment (or pack group) runs the dk/dv walk of its keys
// (kernel_dkv.cuh), adds dS K into its dq from the dS the walk stored, takes a pooled pass's pools'
// backward or its keys' segment max backward in its epilogue, and writes dq last.
#pragma once

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_dkv.cuh"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_tile.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

// The one-CTA-per-segment backward (segment_backward in kernel_plan.h) adds, after the dk/dv
// walk's: dS of the walk's query tiles (up to kQueryTile rows) against the key tile,
// [kQueryTile][kDsPitch] fp32 (for the fp32 path also each warp's scratch of the dq product); with
// two sources (D <= 64) the dq of the first, [kQueryTile][D + 4] fp32, until the second's is added.
// bf16 D = 32 / 64 / 128: 59 / 91 / 87 KB; fp32 D = 32 / 64: 100 / 156 KB (not built at D 128:
// kernel_plan.h segment_backward_built).
template <typename T, int D>
__host__ __device__ constexpr size_t segment_smem() {
  return dkv_smem<T, D>() + size_t(kQueryTile) * kDsPitch * sizeof(float) +
         (D <= 64 ? size_t(kQueryTile) * (D + 4) * sizeof(float) : 0);
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

// A pooled pass's pools' backward in its segment CTA's epilogue (kernel_pass.h Backward::pools_dq):
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
  const int64_t cta = blockIdx.x, b = index_div(blockIdx.y, p.heads),
                h = index_mod(blockIdx.y, p.heads);
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
            scalar_as<T>(dq[dt][e] * float(p.scale * bw.grad_scale));
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

// Backward::key_pool in its segment's CTA, after the walk has written dk's rows of its keys:
// dy[g] added into dx at each column's arg-max of the key tile (still as loaded: dkv_tile's
// layout), a column a thread, as the segment max kernel's backward (accumulate) adds it. The
// first barrier orders the walk's stores of those rows before these loads of them, the second
// these reads of the tile before the epilogue stages dq over it.
template <typename T, int D>
__device__ __forceinline__ void key_pool_backward(const Backward& bw, unsigned char* smem) {
  constexpr int P = pitch<T, D>();
  const SegmentMax& m = bw.key_pool;
  const int64_t g = blockIdx.x, b = index_div(blockIdx.y, m.heads),
                h = index_mod(blockIdx.y, m.heads);
  const T* keys = reinterpret_cast<const T*>(smem);
  __syncthreads();
  const int d = threadIdx.x;
  if (g < m.segments && d < D) {
    float best = 0.f;
    int at = -1;
    for (int c = 0; c < int(m.len); ++c) {
      const float v = scalar_float(keys[c * P + d]);
      if (segment_max_takes(c, v, best)) {
        best = v;
        at = c;
      }
    }
    const float grad = segment_max_dy<T>(m, b * m.heads + h, g, d);
    if (at >= 0) {
      T* e = static_cast<T*>(m.dx) + b * m.dx_stride[0] + h * m.dx_stride[1] +
             (g * m.len + at) * m.dx_stride[2] + d;
      *e = scalar_as<T>(scalar_float(*e) + grad);
    }
  }
  __syncthreads();
}

// A segment_backward pass (kernel_plan.h): one CTA per segment or pack group (as the query CTAs)
// runs the dk/dv walk of its keys of source A, then of source B by segment, and after each adds dS
// K into its dq (kept in shared memory while B's walk runs), which it writes last: the queries' d_o
// rows are read by this CTA alone, so dq may overwrite them. A segment with no key of a source adds
// nothing for it; its dq is still written (an empty buffer's first writer). SOURCE_B: whether it
// may read summaries by segment (not in a pair: kernel_plan.h same_ctas).
template <typename T, int D, bool PACKED, bool SOURCE_B = true>
__device__ __forceinline__ void segment_backward_cta(const Backward& bw, unsigned char* smem) {
  constexpr int QP = D + 4;
  const T* ks = reinterpret_cast<const T*>(smem);  // the walk's key tile (dkv_tile's layout)
  float* ds = reinterpret_cast<float*>(smem + dkv_smem<T, D>());
  [[maybe_unused]] float* first = ds + kQueryTile * kDsPitch;  // two sources: A's dq [64][QP]
  const Pass& p = bw.pass;
  const int64_t b = index_div(blockIdx.y, p.heads), h = index_mod(blockIdx.y, p.heads);
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
  if constexpr (D <= 64 && SOURCE_B) {
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
  if constexpr (!PACKED) {
    if (bw.key_pool.segments > 0) key_pool_backward<T, D>(bw, smem);
  }
  write_gradient<T, D>(reinterpret_cast<float*>(smem),
                       bw.dq,
                       dq,
                       float(p.scale * bw.grad_scale),
                       active,
                       [&](int r) -> int64_t {
                         const TileIndex q = tile_query(p, blockIdx.x, r);
                         return q.valid ? grad_at(bw.dq, b, h, row_of(p.query, q.g, q.i)) : -1;
                       });
  if constexpr (!PACKED && SOURCE_B) {  // (no pair takes a query pool back: pairable)
    if (bw.query_pool.segments > 0) query_pool_backward<T, D>(bw, blockIdx.x);
  }
}

}  // namespace combiner::attention::fused::cuda_detail
