// The fused backward, line for line the CPU model's backward_dq_tile and backward_dkv_tile
// (fused/kernel_cpu.cpp). Weights are recomputed from the saved log-sum-exp: P = exp2(S * scale
// * log2 e - lse * log2 e); dP = dO V^T; dS = P (dP - delta), delta = rowsum(dO * O).
//   dq kernel: one CTA per query tile (as the forward), dQ += dS K over the same key tiles.
//   dkv kernel: one CTA per 64-key tile, walking the query tiles that see its keys (the walk,
//   dkv_tile, in kernel_dkv.cuh): source A's and source B's by segment in one launch, the
//   summaries by prefix in one more.
//   segment kernel (kernel_plan.h segment_backward: every segment one query tile and one key tile
//   per source; its CTA in kernel_segment.cuh): one CTA per segment runs the dk/dv walk of its
//   source A keys, then of its source B keys, and from the same dS^T, stored transposed, adds dS K
//   into its dq: one launch, q, dO, k and v read once, the scores computed once. The CPU model runs
//   that CTA's dk/dv tiles and its dq tile in turn. interleaved kernel (kernel_plan.h
//   interleaved_backward, D 128): the dk/dv kernel's CTAs and the dq kernel's in one launch, a
//   segment's in turn, so that the dq CTAs read its rows from L2. pair kernels (kernel_pass.h
//   BackwardPair): one CTA per segment of two passes, or two walks (the dkv kernel's CTA x of each,
//   then, in a second launch, the dq kernel's), each CTA the first pass's, then the second's, with
//   the shared memory of the kernel they pair.
// Shared memory (D = 32 / 64 / 128): dq bf16 30 / 54 / 102 KB, fp32 71 / 119 / 215 KB (packed:
// 2 KB more); dkv bf16 33 / 57 / 70 KB, fp32 74 / 122 / 143 KB (D = 128 walks 32-query
// tiles); interleaved, the larger of the two.

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_dkv.cuh"
#include "attention/fused/kernel_epilogue.cuh"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_segment.cuh"
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

// CTAs per SM the dq kernel is built for: three for bf16 up to D 64 (at most 168 registers a
// thread), else two. Stated, not left to ptxas's guess, which for some packed instances aimed at
// one more CTA than their registers allow, and spilled.
template <typename T, int D>
__host__ __device__ constexpr int dq_blocks_per_sm() {
  return sizeof(T) == 2 && D <= 64 ? 3 : 2;
}

// Query CTA `cta` of the dq kernel, as the forward's: PACKED, a pack group's tile through the
// index tables.
template <typename T, int D, bool PACKED>
__device__ __forceinline__ void dq_cta(const Backward& bw, int64_t cta, unsigned char* smem) {
  constexpr int P = pitch<T, D>(), M = kQueryTile, N = kKeyTile;
  static_assert(M == kStagedRows && staged_bytes<D>() <= dq_tile_bytes<T, D>(),
                "the epilogue's tile (the index tables after it survive it)");
  T* qs = reinterpret_cast<T*>(smem);
  T* dos = qs + M * P;
  T* ks = dos + M * P;     // [2][N][P]
  T* vs = ks + 2 * N * P;  // [2][N][P]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, qq = lane % 4;
  float* scratch = reinterpret_cast<float*>(vs + 2 * N * P) + warp * scratch_floats<T, N>();
  const PackedTables<M, N> tables(smem + dq_tile_bytes<T, D>());

  const Pass& p = bw.pass;
  const int64_t b = index_div(blockIdx.y, p.heads), h = index_mod(blockIdx.y, p.heads);
  const int64_t chunks = query_chunks(p);
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
  // q's rows lie query_source_shift rows from the queries' (a pooled pass's: kernel_index.h).
  const T* q_rows = q0 + query_source_shift(p) * p.q.row;
  load_rows<T, D, M>(qs, rows_of(q_rows, p.q.row), q0);
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
  if (p.pooled) pool_query_tile<T, D, PACKED>(qs, p, tables, b, h, g, t0, rows);  // as forward

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
      // thread's first column (kernel_index.h Visible), and its dS.
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
                       float(p.scale * bw.grad_scale),
                       warp_active,
                       [&](int r) -> int64_t {
                         const int64_t row = query_row(r);
                         return row >= 0 ? grad_at(bw.dq, b, h, row) : -1;
                       });
}

template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, dq_blocks_per_sm<T, D>())
    dq_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  dq_cta<T, D, PACKED>(bw, blockIdx.x, smem);
  if constexpr (!PACKED) {
    if (bw.query_pool.segments > 0) query_pool_backward<T, D>(bw, blockIdx.x);
  }
}

// The dk/dv walk of a pass in one launch: source A's key tiles, then source B's by segment.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1) dkv_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  const int64_t a_ctas = key_ctas(bw.pass, false);
  if (blockIdx.x < a_ctas) {
    dkv_tile<T, D, Keys::kSourceA, PACKED>(bw, blockIdx.x, smem);
    if constexpr (!PACKED) {
      if (bw.key_pool.segments > 0) key_pool_walk_backward<T, D>(bw, blockIdx.x);
    }
  } else {
    dkv_tile<T, D, Keys::kSegmentSummaries, PACKED>(bw, blockIdx.x - a_ctas, smem);
  }
}

// The dk/dv walk and dq in one launch (kernel_plan.h interleaved_backward): each segment's CTAs of
// source A's keys, of source B's, then of its queries, so that its dq CTAs find its rows in L2.
template <typename T, int D, bool PACKED>
__host__ __device__ constexpr size_t interleaved_smem() {
  return dkv_smem<T, D>() > dq_smem<T, D, PACKED>() ? dkv_smem<T, D>() : dq_smem<T, D, PACKED>();
}
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1)
    interleaved_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  const BackwardCta c = interleaved_cta(bw.pass, blockIdx.x);
  if (c.dq) {
    dq_cta<T, D, PACKED>(bw, c.cta, smem);
    if constexpr (!PACKED) {
      if (bw.query_pool.segments > 0) query_pool_backward<T, D>(bw, c.cta);
    }
  } else if (c.keys == Keys::kSourceA) {
    dkv_tile<T, D, Keys::kSourceA, PACKED>(bw, c.cta, smem);
    if constexpr (!PACKED) {
      if (bw.key_pool.segments > 0) key_pool_walk_backward<T, D>(bw, c.cta);
    }
  } else {
    dkv_tile<T, D, Keys::kSegmentSummaries, PACKED>(bw, c.cta, smem);
  }
}

template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1)
    segment_backward_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  segment_backward_cta<T, D, PACKED>(bw, smem);
}

// Two segment_backward passes in one launch (kernel.h BackwardPair, pairable): CTA x runs the
// first's CTA x, then the second's. The barrier between them lets the second's loads reuse the
// shared memory the first's epilogue staged in, and orders the first's stores of the rows the
// second adds to (written by this CTA alone) before the second's loads of them. Each part is an
// inlined copy of the CTA's code, without the second source's walk, which neither has: each
// reads its pass from the kernel's parameters at offsets fixed when it compiles, as operands. (One
// copy for both, reading its pass at the part's offset, loads each parameter it uses into a
// register, and at D 128 spilled.)
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1)
    segment_pair_kernel(const __grid_constant__ BackwardPair pair) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  segment_backward_cta<T, D, PACKED, false>(pair.first, smem);
  if (blockIdx.x >= query_ctas(pair.second.pass)) return;
  __syncthreads();
  segment_backward_cta<T, D, PACKED, false>(pair.second, smem);
}

// Two walks (kernel_plan.h walks_pairable) in two launches: CTA x runs the first pass's key tile x,
// then the second's, which adds into the dk, dv rows the first has just stored; then, in the
// second launch, the same for their query tiles' dq. Each part an inlined copy, as above.
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_pair_kernel(const __grid_constant__ BackwardPair pair) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  dkv_tile<T, D, Keys::kSourceA, PACKED>(pair.first, blockIdx.x, smem);
  if (blockIdx.x >= key_ctas(pair.second.pass, false)) return;
  __syncthreads();
  dkv_tile<T, D, Keys::kSourceA, PACKED>(pair.second, blockIdx.x, smem);
  if constexpr (!PACKED) {
    if (pair.second.key_pool.segments > 0) key_pool_walk_backward<T, D>(pair.second, blockIdx.x);
  }
}
template <typename T, int D, bool PACKED>
__global__ void __launch_bounds__(kThreads, dq_blocks_per_sm<T, D>())
    dq_pair_kernel(const __grid_constant__ BackwardPair pair) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  dq_cta<T, D, PACKED>(pair.first, blockIdx.x, smem);
  if (blockIdx.x >= query_ctas(pair.second.pass)) return;
  __syncthreads();
  dq_cta<T, D, PACKED>(pair.second, blockIdx.x, smem);
}

// The summaries' dk/dv walk (by prefix): CTA (summary tile, part).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    dkv_summary_kernel(const __grid_constant__ Backward bw) {
  COMBINER_DYNAMIC_SHARED(unsigned char, smem);
  dkv_tile<T, D, Keys::kPrefixSummaries, false>(bw, blockIdx.x, smem);
}

// Its launch: a CTA per (summary tile, part).
template <typename T, int D>
void launch_summary_walk(const Backward& bw, void* stream) {
  const Pass& p = bw.pass;
  launch(dkv_summary_kernel<T, D>,
         dim3(unsigned(ceil_div(p.summary_count, kKeyTile) *
                       ceil_div(p.query.segments, segments_per_part(p))),
              unsigned(p.batch * p.heads)),
         dkv_smem<T, D>(),
         stream,
         "fused backward (d summaries)",
         bw);
}

}  // namespace combiner::attention::fused::cuda_detail

namespace combiner::attention::fused {

void backward_cuda(const Backward& bw, void* stream) {
  using namespace cuda_detail;
  const Pass& p = bw.pass;
  if (bw.key_pool.segments > 0 && !key_pool_fits(p, bw.key_pool, true))
    throw std::runtime_error("fused backward: a key pool its CTAs cannot take back");
  if (bw.query_pool.segments > 0 && !query_pool_backward_fits(bw))
    throw std::runtime_error("fused backward: a query pool its CTAs cannot take back");
  if (bw.made_delta && !makes_delta_built(p))
    throw std::runtime_error("fused backward: o's delta asked of a pass that cannot make it");
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
    if constexpr (interleaved_backward_built(D)) {
      if (interleaved_backward(bw)) {
        launch(packed ? interleaved_kernel<T, D, true> : interleaved_kernel<T, D, false>,
               dim3(unsigned(interleaved_ctas(p)), heads),
               packed ? interleaved_smem<T, D, true>() : interleaved_smem<T, D, false>(),
               stream,
               "fused backward (dk, dv and dq)",
               bw);
        if (prefix_summaries(p)) launch_summary_walk<T, D>(bw, stream);
        return;
      }
    }
    // dk, dv first: they read d_o, which dq may overwrite in place (Backward in kernel_pass.h).
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
    if (prefix_summaries(p)) launch_summary_walk<T, D>(bw, stream);
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

void backward_pair_cuda(const BackwardPair& pair, void* stream) {
  using namespace cuda_detail;
  const Pass& p = pair.first.pass;
  if (!pairable(pair.first, pair.second))
    throw std::runtime_error(
        "fused backward (pair): the passes do not pair (kernel_plan.h pairable)");
  if (pair.second.key_pool.segments > 0 &&
      !key_pool_fits(pair.second.pass, pair.second.key_pool, true))
    throw std::runtime_error("fused backward (pair): a key pool its CTAs cannot take back");
  static_assert(sizeof(BackwardPair) <= 4096, "a kernel parameter of at most 4 KB");
  dispatch(p.dtype, p.dim, "fused backward (pair)", [&](auto type, auto dim) {
    using T = typename decltype(type)::type;
    constexpr int D = decltype(dim)::value;
    constexpr Dtype dtype = sizeof(T) == 4 ? Dtype::kFloat32 : Dtype::kBFloat16;
    const unsigned heads = unsigned(p.batch * p.heads);
    const bool packed = segment_pack(p) > 1;
    if constexpr (segment_backward_built(dtype, D)) {
      if (segment_backward(p)) {
        const dim3 grid(unsigned(query_ctas(p)), heads);
        const char* what = "fused backward (two passes, one CTA per segment)";
        if (packed)
          launch(segment_pair_kernel<T, D, true>, grid, segment_smem<T, D>(), stream, what, pair);
        else
          launch(segment_pair_kernel<T, D, false>, grid, segment_smem<T, D>(), stream, what, pair);
        return;
      }
    }
    if constexpr (!interleaved_backward_built(D)) {
      const dim3 dkv_grid(unsigned(dkv_ctas(p)), heads), dq_grid(unsigned(query_ctas(p)), heads);
      const char* dkv = "fused backward (two passes, dk, dv)";
      const char* dq = "fused backward (two passes, dq)";
      if (packed) {
        launch(dkv_pair_kernel<T, D, true>, dkv_grid, dkv_smem<T, D>(), stream, dkv, pair);
        launch(dq_pair_kernel<T, D, true>, dq_grid, dq_smem<T, D, true>(), stream, dq, pair);
      } else {
        launch(dkv_pair_kernel<T, D, false>, dkv_grid, dkv_smem<T, D>(), stream, dkv, pair);
        launch(dq_pair_kernel<T, D, false>, dq_grid, dq_smem<T, D, false>(), stream, dq, pair);
      }
    }
  });
}

}  // namespace combiner::attention::fused
