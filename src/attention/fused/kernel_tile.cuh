// Device building blocks of the fused kernels: cp.async tile loads into padded shared memory,
// and the two warp-level products every kernel is made of, on 16 rows per warp:
//   warp_nt: C[16 x N]  = A[16 x D] . B[N x D]^T   (scores: Q K^T, dO V^T, K Q^T, V dO^T)
//   warp_nn: O[16 x D] += P[16 x N] . B[N x D]     (P V, dS K, P^T dO, dS^T Q)
// C, O and P live in registers in the accumulator layout of mma.m16n8: thread (g = lane / 4,
// q = lane % 4) holds, per 8-column block i, (g, 8i + 2q), (g, 8i + 2q + 1), (g + 8, 8i + 2q),
// (g + 8, 8i + 2q + 1). bfloat16 runs on the tensor cores (ldmatrix + mma.sync m16n8k16, fp32
// accumulate); float32 computes the same elements with FFMA (a per-warp scratch turns P into a
// shared-memory operand), so both share every line of the kernels around them.
#pragma once

#include <cstdint>

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_scalar.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared-memory row pitch in elements: 16 bytes of padding per row put the 8 rows one ldmatrix
// (or a quarter-warp's float4 reads) touches on distinct banks.
template <typename T, int D>
__host__ __device__ constexpr int pitch() {
  return D + 16 / int(sizeof(T));
}
// The fp32 path's per-warp scratch for P: 16 rows of N + 4 floats.
template <typename T, int N>
__host__ __device__ constexpr int scratch_floats() {
  return sizeof(T) == 4 ? 16 * (N + 4) : 0;
}

template <typename T>
__device__ __forceinline__ const T* at(const Operand& x, int64_t b, int64_t h, int64_t row) {
  return static_cast<const T*>(x.data) + b * x.batch + h * x.head + row * x.row;
}

// One source's keys and values in one segment, as a kernel loads them (load_strided): key j at
// k + j * k_step, its value at v + j * v_step (elements), for j < count (a zero row past it).
template <typename T>
struct SourceRows {
  const T* k = nullptr;
  const T* v = nullptr;
  int64_t k_step = 0, v_step = 0;
  int count = 0;
};
template <typename T>
__device__ __forceinline__ SourceRows<T> source_rows(const Operand& k,
                                                     const Operand& v,
                                                     const Geometry& k_at,
                                                     const Geometry& v_at,
                                                     int64_t b,
                                                     int64_t h,
                                                     int64_t g,
                                                     int count) {
  SourceRows<T> s;
  s.count = count;
  if (count == 0) return s;  // (segment g may start below row 0: fused/kernel_pass.h Geometry)
  s.k = at<T>(k, b, h, row_of(k_at, g, 0));
  s.v = at<T>(v, b, h, row_of(v_at, g, 0));
  s.k_step = k_at.row_stride * k.row;
  s.v_step = v_at.row_stride * v.row;
  return s;
}
// Source A's first `count` keys of segment g, and source B's (by segment through its geometries,
// by prefix rows 0..count-1 of ks and u).
template <typename T>
__device__ __forceinline__ SourceRows<T> source_a_rows(
    const Pass& p, int64_t b, int64_t h, int64_t g, int count) {
  return source_rows<T>(p.k, p.v, p.key, p.value, b, h, g, count);
}
template <typename T>
__device__ __forceinline__ SourceRows<T> source_b_rows(
    const Pass& p, int64_t b, int64_t h, int64_t g, int count) {
  if (p.by_segment)
    return source_rows<T>(p.ks, p.u, p.summary_key, p.summary_value, b, h, g, count);
  const Geometry prefix = {1, count, 0, 1, count, 0};  // key j at row j
  return source_rows<T>(p.ks, p.u, prefix, prefix, b, h, 0, count);
}

// ---- a packed tile's index tables (kernel_index.h segment_pack) ----

__host__ __device__ constexpr size_t packed_table_bytes(int rows, int cols) {
  return size_t(4 * rows + 4 * cols) * sizeof(int);
}
// In shared memory: per query row of the tile its segment (less the group's first, g0), its
// index (-1: none, kernel_index.h tile_query) and how many keys of each source its segment has; per
// key column of each source (a packed CTA walks one key tile of each, kernel_index.h
// query_tile_keys) its row of k and of v (of ks and u for source B; -1: none, kernel_index.h
// packed_key). They are filled once per CTA, then the CTA synchronises, so that the loads and masks
// after it look rows up instead of dividing.
template <int ROWS, int COLS>
struct PackedTables {
  int* t;  // q_seg [ROWS], q_idx [ROWS], q_keys [2][ROWS], k_row [2][COLS], v_row [2][COLS]

  __device__ explicit PackedTables(unsigned char* at) : t(reinterpret_cast<int*>(at)) {}
  __device__ int& q_seg(int r) const { return t[r]; }
  __device__ int& q_idx(int r) const { return t[ROWS + r]; }
  __device__ int& q_keys(bool b, int r) const { return t[2 * ROWS + b * ROWS + r]; }
  __device__ int& k_row(bool b, int c) const { return t[4 * ROWS + b * COLS + c]; }
  __device__ int& v_row(bool b, int c) const { return t[4 * ROWS + (2 + b) * COLS + c]; }

  __device__ void fill(const Pass& p, int64_t cta, int64_t g0) const {
    for (int r = threadIdx.x; r < ROWS; r += kThreads) {
      const TileIndex q = tile_query(p, cta, r);
      q_seg(r) = int(q.g - g0);
      q_idx(r) = q.valid ? int(q.i) : -1;
      q_keys(false, r) = q.valid && q.g < p.key.segments ? int(valid_count(p.key, q.g)) : 0;
      q_keys(true, r) =
          q.valid && p.summaries && q.g < p.summary_key.segments ? int(summary_terms(p, q.g)) : 0;
    }
    for (int i = threadIdx.x; i < 2 * COLS; i += kThreads) {
      const bool b = i >= COLS;
      const int c = i % COLS;
      const TileIndex k = packed_key(p, b, cta, c);
      const Geometry& key = b ? p.summary_key : p.key;
      const Geometry& value = b ? p.summary_value : p.value;
      k_row(b, c) = k.valid ? int(row_of(key, k.g, k.i)) : -1;
      v_row(b, c) = k.valid ? int(row_of(value, k.g, k.i)) : -1;
    }
    __syncthreads();
  }
  // The columns of a key tile (source B's if b) that row r sees: its own segment's keys it sees
  // (kernel_index.h packed_key: column seg x seg_len + j), counted from column `first`
  // (kernel_index.h Visible).
  __device__ Visible keys_seen_by(const Pass& p, int r, bool b, Mask mask, int first) const {
    const int t = q_idx(r), len = int(b ? p.summary_key.seg_len : p.key.seg_len);
    return t < 0 ? Visible{} : from(keys_seen(mask, t, q_keys(b, r)), first - q_seg(r) * len);
  }
};

// ---- cp.async: 16 bytes (or 4) per call, zero-filled where the row does not exist ----
// (On the CPU's emulator, simt/emulator.h, a copy lands when its thread waits for its group.)

#if defined(__CUDACC__)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile(
      "cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
// 4 bytes (a float of lse or delta); zero-filled where !valid.
__device__ __forceinline__ void cp_async4(float* smem, const float* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile(
      "cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#else
inline void cp_async16(void* smem, const void* gmem, bool valid) {
  simt::cp_async(smem, valid ? gmem : nullptr, 16);
}
inline void cp_async4(float* smem, const float* gmem, bool valid) {
  simt::cp_async(smem, valid ? gmem : nullptr, 4);
}
inline void cp_async_commit() {
  simt::cp_async_commit();
}
template <int N>
void cp_async_wait() {
  simt::cp_async_wait(N);
}
#endif

// ROWS rows of D elements into smem (pitch P); row(r) gives the source or nullptr (zeros, so a
// missing value row multiplies a zero weight into 0, never into NaN). `any` is a valid address.
template <typename T, int D, int ROWS, typename RowFn>
__device__ __forceinline__ void load_rows(T* smem, RowFn row, const void* any) {
  constexpr int kChunk = 16 / int(sizeof(T)), kPerRow = D / kChunk;
  for (int i = threadIdx.x; i < ROWS * kPerRow; i += kThreads) {
    const int r = i / kPerRow, c = i % kPerRow;
    const T* src = row(r);
    cp_async16(smem + r * pitch<T, D>() + c * kChunk, src ? src + c * kChunk : any, src != nullptr);
  }
}

// ROWS rows of D elements into smem as load_rows, for rows that lie `step` elements apart: tile
// row r is row first + r, at base + start + (first + r) x step, for first + r < count (zeros past
// it). Each thread's chunks sit in one column of rows kThreads / kPerRow apart, so its source
// offset advances by a constant instead of being computed again per chunk from the row's index.
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_strided(
    T* smem, const T* base, int64_t start, int64_t step, int first, int count, const void* any) {
  constexpr int kChunk = 16 / int(sizeof(T)), kPerRow = D / kChunk;
  constexpr int kRowsApart = kThreads / kPerRow;
  static_assert(kThreads % kPerRow == 0 && ROWS % kRowsApart == 0, "whole rows per pass");
  const int c = threadIdx.x % kPerRow, r0 = threadIdx.x / kPerRow;
  int64_t offset = start + int64_t(first + r0) * step + c * kChunk;
#pragma unroll
  for (int r = r0; r < ROWS; r += kRowsApart, offset += kRowsApart * step) {
    const bool valid = first + r < count;
    cp_async16(smem + r * pitch<T, D>() + c * kChunk, valid ? base + offset : any, valid);
  }
}

// A packed CTA's key tile of source A or (`summary`) B: column c is row tables.k_row(c) of k (ks)
// and tables.v_row(c) of v (u) in head (b, h), zeros where there is none.
template <typename T, int D, int COLS, int ROWS>
__device__ __forceinline__ void load_packed_keys(T* k_smem,
                                                 T* v_smem,
                                                 const PackedTables<ROWS, COLS>& tables,
                                                 const Pass& p,
                                                 bool summary,
                                                 int64_t b,
                                                 int64_t h) {
  const Operand& k = summary ? p.ks : p.k;
  const Operand& v = summary ? p.u : p.v;
  const T* k0 = at<T>(k, b, h, 0);
  const T* v0 = at<T>(v, b, h, 0);
  load_rows<T, D, COLS>(
      k_smem,
      [&](int c) -> const T* {
        const int row = tables.k_row(summary, c);
        return row >= 0 ? k0 + int64_t(row) * k.row : nullptr;
      },
      k0);
  load_rows<T, D, COLS>(
      v_smem,
      [&](int c) -> const T* {
        const int row = tables.v_row(summary, c);
        return row >= 0 ? v0 + int64_t(row) * v.row : nullptr;
      },
      v0);
}

// ---- a pooled pass's running max (kernel_pass.h Pass::pooled) ----

// The running max down a tile's rows, one column per thread (column threadIdx.x < D), carried
// from one tile to the next (the backward walks a segment in two tiles at D 128), or from rows
// read from memory before the tile (`carry`: the forward's query tile x > 0). step(r): -1
// for a row without a query or key (left as it is), 0 for index 0 of its segment (the max starts
// anew), 1 otherwise. out(r): where row r's max goes (the tile row itself, in place; a row of ks;
// nullptr: nowhere). Ties and NaN as RunningMax (kernel_scan.h running_max_takes): bit for bit the
// pool kernel's values, which are the rows' own elements.
template <typename T, int D>
struct ColumnMax {
  static_assert(D <= kThreads, "a column per thread");
  float best = 0.f;
  int steps = 0;

  // Rows 0..count-1 of `tile` (pitch<T, D>()).
  template <typename StepFn, typename OutFn>
  __device__ __forceinline__ void walk(const T* tile, int count, StepFn step, OutFn out) {
    const int d = threadIdx.x;
    if (d >= D) return;
    for (int r = 0; r < count; ++r) {
      const int kind = step(r);
      if (kind < 0) continue;
      if (kind == 0) steps = 0;
      const float v = scalar_float(tile[r * pitch<T, D>() + d]);
      if (running_max_takes(steps, v, best)) best = v;
      ++steps;
      if (T* o = out(r)) o[d] = scalar_as<T>(best);
    }
  }
  // Rows 0..count-1 of a segment, row(r) pointing at each in memory (read once, plain loads),
  // where its running max starts: the state a walk of the rows after them continues from.
  template <typename RowFn>
  __device__ __forceinline__ void carry(int count, RowFn row) {
    const int d = threadIdx.x;
    if (d >= D) return;
    for (int r = 0; r < count; ++r) {
      const float v = scalar_float(row(r)[d]);
      if (running_max_takes(steps, v, best)) best = v;
      ++steps;
    }
  }
};

// A pooled pass's query tile (kernel.h Pass::pooled, pools_on_chip), once it has landed, made
// its queries' running max down their segment in place: tile row r is query t0 + r of segment g
// (`rows` of them; packed, the tables' query r), carried from the segment's queries before the
// tile, read again from q. The forward's CTA and the backward's dq CTA, before their walks.
template <typename T, int D, bool PACKED, int M, int N>
__device__ __forceinline__ void pool_query_tile(T* qs,
                                                const Pass& p,
                                                const PackedTables<M, N>& tables,
                                                int64_t b,
                                                int64_t h,
                                                int64_t g,
                                                int t0,
                                                int rows) {
  cp_async_wait<0>();
  __syncthreads();
  ColumnMax<T, D> queries;
  if constexpr (!PACKED)
    queries.carry(t0, [&](int r) { return at<T>(p.q, b, h, query_source_row(p, g, r)); });
  queries.walk(
      qs,
      M,
      [&](int r) {
        if constexpr (PACKED) return tables.q_idx(r) < 0 ? -1 : tables.q_idx(r) == 0 ? 0 : 1;
        return r < rows ? (t0 + r == 0 ? 0 : 1) : -1;
      },
      [&](int r) -> T* { return qs + r * pitch<T, D>(); });
  __syncthreads();
}

// ---- the softmax's exponential ----

// 2^x as the SFU gives it (ex2.approx.ftz: one MUFU.EX2), results below 2^-126 flushed to 0.
// exp2f is the same MUFU.EX2 plus a rescaling of its input and output around it, three more
// instructions per weight, only to keep such results as subnormals. Every weight of the kernels'
// softmax is at most 1 (a score less its row's running max or its log-sum-exp), and its row's
// sum holds a weight of 1 (the running max's), so a weight under 2^-126 adds nothing to it.
__device__ __forceinline__ float exp2_ftz(float x) {
#if defined(__CUDACC__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  const float y = std::exp2(x);
  return y < 1.17549435e-38f ? 0.f : y;  // FLT_MIN
#endif
}

// ---- pairs of adjacent elements (an accumulator's (x, x + 1)) ----

__device__ __forceinline__ void store_pair(bf16* p, float x, float y) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
__device__ __forceinline__ void store_pair(float* p, float x, float y) {
  *reinterpret_cast<float2*>(p) = make_float2(x, y);
}
__device__ __forceinline__ float2 load_pair(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 load_pair(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}

// Writes (x, y) at element offset `at` of a gradient output (GradOut's kinds).
template <typename T>
__device__ __forceinline__ void write_grad_pair(const GradOut& out, int64_t at, float x, float y) {
  if (out.kind == GradOut::kStore) {
    if (out.addend) {
      const float2 a = out.addend_in_storage
                           ? load_pair(static_cast<const T*>(out.addend) + at)
                           : load_pair(static_cast<const float*>(out.addend) + at);
      x += a.x;
      y += a.y;
    }
    store_pair(static_cast<T*>(out.data) + at, x, y);
  } else if (out.kind == GradOut::kStoreAcc) {
    store_pair(static_cast<float*>(out.data) + at, x, y);
  } else if (out.kind == GradOut::kAtomic) {
    atomicAdd(static_cast<float*>(out.data) + at, x);
    atomicAdd(static_cast<float*>(out.data) + at + 1, y);
  }
}

// ---- bfloat16: ldmatrix + mma.sync ----

#if defined(__CUDACC__)
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4],
                                         const uint32_t (&a)[4],
                                         uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#else
inline void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  simt::ldmatrix_x4(r, p, false);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  simt::ldmatrix_x4(r, p, true);
}
inline void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  simt::mma_bf16(c, a, b0, b1);
}
#endif
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// This thread's lane, read where it is used. The tensor-core products below address their
// shared-memory tiles by lane; read once per kernel, every tile's lane-dependent address would be
// computed once and held in a register from the kernel's first product to its last (the backward
// pair at D 128 spilled with them). Read anew (asm volatile: neither merged nor hoisted), each
// product computes its addresses where it runs, a few instructions per tile.
__device__ __forceinline__ int lane_index() {
#if defined(__CUDA_ARCH__)
  int thread;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
  return thread & 31;
#else
  return int(threadIdx.x & 31);
#endif
}

template <int D, int N>
__device__ __forceinline__ void warp_nt(float (&c)[N / 8][4],
                                        const bf16* a,
                                        const bf16* b,
                                        float*) {
  constexpr int P = pitch<bf16, D>();
  const int lane = lane_index();
#pragma unroll
  for (int i = 0; i < N / 8; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a + (lane % 16) * P + kk * 16 + (lane / 16) * 8);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf,
                  b + (np * 16 + lane % 8 + (lane / 16) * 8) * P + kk * 16 + (lane / 8 % 2) * 8);
      mma_bf16(c[2 * np], af, bf[0], bf[1]);
      mma_bf16(c[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

template <int D, int N>
__device__ __forceinline__ void warp_nn(float (&o)[D / 8][4],
                                        const float (&p)[N / 8][4],
                                        const bf16* b,
                                        float*) {
  constexpr int P = pitch<bf16, D>();
  const int lane = lane_index();
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    // Two accumulator blocks of P are exactly one m16k16 A operand.
    const uint32_t af[4] = {pack_bf16(p[2 * kk][0], p[2 * kk][1]),
                            pack_bf16(p[2 * kk][2], p[2 * kk][3]),
                            pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                            pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      ldmatrix_x4_trans(
          bf, b + (kk * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + dp * 16 + (lane / 16) * 8);
      mma_bf16(o[2 * dp], af, bf[0], bf[1]);
      mma_bf16(o[2 * dp + 1], af, bf[2], bf[3]);
    }
  }
}

// ---- float32: the same elements with FFMA ----

template <int D, int N>
__device__ __forceinline__ void warp_nt(float (&c)[N / 8][4],
                                        const float* a,
                                        const float* b,
                                        float*) {
  constexpr int P = pitch<float, D>();
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < N / 8; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
  const float* a0 = a + g * P;
  const float* a1 = a + (g + 8) * P;
#pragma unroll 2
  for (int d = 0; d < D; d += 4) {
    const float4 x0 = *reinterpret_cast<const float4*>(a0 + d);
    const float4 x1 = *reinterpret_cast<const float4*>(a1 + d);
#pragma unroll
    for (int i = 0; i < N / 8; ++i)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float4 y = *reinterpret_cast<const float4*>(b + (i * 8 + 2 * q + e) * P + d);
        c[i][e] += x0.x * y.x + x0.y * y.y + x0.z * y.z + x0.w * y.w;
        c[i][2 + e] += x1.x * y.x + x1.y * y.y + x1.z * y.z + x1.w * y.w;
      }
  }
}

template <int D, int N>
__device__ __forceinline__ void warp_nn(float (&o)[D / 8][4],
                                        const float (&p)[N / 8][4],
                                        const float* b,
                                        float* scratch) {
  constexpr int P = pitch<float, D>(), S = N + 4;
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    store_pair(scratch + g * S + i * 8 + 2 * q, p[i][0], p[i][1]);
    store_pair(scratch + (g + 8) * S + i * 8 + 2 * q, p[i][2], p[i][3]);
  }
  __syncwarp();
#pragma unroll 4
  for (int k = 0; k < N; ++k) {
    const float s0 = scratch[g * S + k], s1 = scratch[(g + 8) * S + k];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const float2 y = load_pair(b + k * P + dt * 8 + 2 * q);
      o[dt][0] += s0 * y.x;
      o[dt][1] += s0 * y.y;
      o[dt][2] += s1 * y.x;
      o[dt][3] += s1 * y.y;
    }
  }
  __syncwarp();
}

// Max and sum over the 4 lanes that share an accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace combiner::attention::fused::cuda_detail
