// The fused kernels' epilogue: a CTA's [64 x D] float32 result (o, dq, dk or dv, in the four
// warps' accumulators) written to global memory as whole rows in 16-byte pieces.
//
// A pass that adds its part to an earlier pass's (the gradients of q, k and v; the forward's
// log-sum-exp merge) reads what it adds to first. Written from the accumulators, each thread's
// pairs (4 bytes of bf16) are read and stored one after another: the compiler cannot move a read
// above an earlier store that may alias it, so every pair waits a round trip to memory, 32 to 64
// of them per thread in turn. Here the result goes through shared memory instead: every thread
// issues the loads of all its pieces at once, then stores them; one round trip, whole rows.
//   1. stage_rows: each warp's 16 rows of the accumulator, times a per-row weight, into an fp32
//      tile in shared memory (pitch D + 4 floats);
//   2. write_rows: thread i takes pieces i, i + 128, ... of the tile's rows; loads each piece's
//      earlier value (kStore's addend, or o for the merge), then stores tile + weight x earlier,
//      rounded to T. Rows whose offset is negative are not written.
#pragma once

#include <cstdint>

#include "attention/fused/kernel_tile.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

constexpr int kStagedRows = 64;  // a query tile (forward, dq) or a key tile (dk, dv)

template <int D>
__host__ __device__ constexpr int stage_pitch() {
  return D + 4;
}
// Shared memory the staging needs: the tile, and a weight and a flag per row (the forward's).
template <int D>
__host__ __device__ constexpr size_t staged_bytes() {
  return size_t(kStagedRows) * (stage_pitch<D>() + 2) * sizeof(float);
}

// Warp `warp`'s accumulator rows (tile rows 16 warp + g and 16 warp + g + 8) times w[0] and w[1].
template <int D>
__device__ __forceinline__ void stage_rows(float* tile,
                                           int warp,
                                           const float (&acc)[D / 8][4],
                                           const float (&w)[2]) {
  constexpr int P = stage_pitch<D>();
  const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  float* row0 = tile + (16 * warp + g) * P + 2 * q;
  float* row1 = row0 + 8 * P;
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) {
    *reinterpret_cast<float2*>(row0 + dt * 8) = make_float2(acc[dt][0] * w[0], acc[dt][1] * w[0]);
    *reinterpret_cast<float2*>(row1 + dt * 8) = make_float2(acc[dt][2] * w[1], acc[dt][3] * w[1]);
  }
}

// A piece: 16 bytes of T, 8 bf16 or 4 floats, to and from floats.
__device__ __forceinline__ void to_floats(const uint4& bits, float (&out)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void to_floats(const uint4& bits, float (&out)[4]) {
  const float* f = reinterpret_cast<const float*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = f[i];
}
__device__ __forceinline__ uint4 from_floats(const float (&x)[8]) {
  uint4 bits;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
  return bits;
}
__device__ __forceinline__ uint4 from_floats(const float (&x)[4]) {
  return make_uint4(
      __float_as_uint(x[0]), __float_as_uint(x[1]), __float_as_uint(x[2]), __float_as_uint(x[3]));
}

// The E floats of a staged tile row's piece at `src` (16-byte aligned).
template <int E>
__device__ __forceinline__ void load_staged(const float* src, float (&x)[E]) {
#pragma unroll
  for (int e = 0; e < E; e += 4) {
    const float4 v = *reinterpret_cast<const float4*>(src + e);
    x[e] = v.x;
    x[e + 1] = v.y;
    x[e + 2] = v.z;
    x[e + 3] = v.w;
  }
}

// A row's dot product a . b in 16-byte pieces, LANES consecutive threads a row, as the delta
// kernel (kernel_forward.cu) sums one: each thread's products of its piece in turn, then across
// the row's threads by shuffles. Every thread of the warp calls it; each gets its row's sum.
template <int LANES, int E>
__device__ __forceinline__ float piece_dot(const float (&a)[E], const float (&b)[E]) {
  static_assert(32 % LANES == 0, "a row's pieces in one warp");
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) sum += a[e] * b[e];
#pragma unroll
  for (int off = LANES / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  return sum;
}

// Writes tile row r to data + offset(r) (elements; skipped where negative) as
// tile[r] + weight[r] x earlier[r], earlier read at the same offset of `earlier` (T; none where
// null). Every piece's earlier value is loaded before any piece is stored, so `earlier` may be
// `data` itself. `weight` (kStagedRows floats in shared memory) may be null: 1. With `mean_with`
// (T, read at the same offset), the mean of that value and mean_with's is stored instead
// (Forward::mean_with).
template <typename T, int D, typename OffsetFn>
__device__ __forceinline__ void write_rows(const float* tile,
                                           T* data,
                                           const T* earlier,
                                           const float* weight,
                                           OffsetFn offset,
                                           const T* mean_with = nullptr) {
  constexpr int E = 16 / int(sizeof(T)), kPieces = D / E;
  constexpr int kPerThread = kStagedRows * kPieces / kThreads;
  static_assert(kStagedRows * kPieces % kThreads == 0, "whole pieces per thread");
  constexpr int P = stage_pitch<D>();
  int64_t at[kPerThread];
  uint4 before[kPerThread], with[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int piece = threadIdx.x + i * kThreads, r = piece / kPieces, c = piece % kPieces * E;
    const int64_t row = offset(r);
    at[i] = row < 0 ? -1 : row + c;
    before[i] = with[i] = make_uint4(0, 0, 0, 0);
    if (earlier && at[i] >= 0) before[i] = *reinterpret_cast<const uint4*>(earlier + at[i]);
    if (mean_with && at[i] >= 0) with[i] = *reinterpret_cast<const uint4*>(mean_with + at[i]);
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    if (at[i] < 0) continue;
    const int piece = threadIdx.x + i * kThreads, r = piece / kPieces, c = piece % kPieces * E;
    float x[E], prev[E];
    to_floats(before[i], prev);
    const float w = weight ? weight[r] : 1.f;
    load_staged(tile + r * P + c, x);
    if (earlier) {
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] += w * prev[e];
    }
    if (mean_with) {
      float other[E];
      to_floats(with[i], other);
#pragma unroll
      for (int e = 0; e < E; ++e) x[e] = 0.5f * (x[e] + other[e]);
    }
    *reinterpret_cast<uint4*>(data + at[i]) = from_floats(x);
  }
}

// A gradient's epilogue (GradOut in kernel_pass.h): kStore (its addend in the pass dtype or none)
// through the staged tile; kStoreAcc, kAtomic and an Acc addend pair by pair from the
// accumulators, as write_grad_pair. `offset(r)`: the element offset of tile row r in the output
// (negative: none); `scale` multiplies every value. Every thread of the CTA calls it (it
// synchronises); `active`: whether this warp's rows hold a result. The tile may overlap any
// shared memory the kernel no longer reads.
template <typename T, int D, typename OffsetFn>
__device__ __forceinline__ void write_gradient(float* tile,
                                               const GradOut& out,
                                               const float (&acc)[D / 8][4],
                                               float scale,
                                               bool active,
                                               OffsetFn offset) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
  if (out.kind == GradOut::kNone) return;
  if (out.kind != GradOut::kStore || (out.addend && !out.addend_in_storage)) {
    if (!active) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t row = offset(16 * warp + g + 8 * r);
      if (row < 0) continue;
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
        write_grad_pair<T>(
            out, row + dt * 8 + 2 * q, acc[dt][2 * r] * scale, acc[dt][2 * r + 1] * scale);
    }
    return;
  }
  __syncthreads();  // the tile's shared memory is free (and an earlier write_rows has read it)
  if (active) stage_rows<D>(tile, warp, acc, {scale, scale});
  __syncthreads();
  write_rows<T, D>(
      tile, static_cast<T*>(out.data), static_cast<const T*>(out.addend), nullptr, offset);
}

// write_gradient's kStore path with no addend that also takes the dot product of each row, as
// stored, with tile row r's row of `with` (T in shared memory, pitch<T, D>() apart: the values
// whose gradient this is), into dots[dot_at(r)] (skipped where negative; kernel_pass.h
// Backward::summary_delta), summed as the delta kernel sums a row of o and d_o (piece_dot).
// `scale` multiplies every value, as write_gradient's.
template <typename T, int D, typename OffsetFn, typename DotFn>
__device__ __forceinline__ void write_gradient_dot(float* tile,
                                                   const GradOut& out,
                                                   const float (&acc)[D / 8][4],
                                                   float scale,
                                                   bool active,
                                                   OffsetFn offset,
                                                   const T* with,
                                                   float* dots,
                                                   DotFn dot_at) {
  constexpr int E = 16 / int(sizeof(T)), kPieces = D / E;
  constexpr int kPerThread = kStagedRows * kPieces / kThreads;
  static_assert(kStagedRows * kPieces % kThreads == 0, "whole pieces per thread");
  constexpr int P = stage_pitch<D>(), WP = pitch<T, D>();
  __syncthreads();  // the tile's shared memory is free (and an earlier write_rows has read it)
  if (active) stage_rows<D>(tile, threadIdx.x / 32, acc, {scale, scale});
  __syncthreads();
  T* data = static_cast<T*>(out.data);
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int piece = threadIdx.x + i * kThreads, r = piece / kPieces, c = piece % kPieces * E;
    const int64_t row = offset(r);
    float x[E], stored[E], w[E];
    load_staged(tile + r * P + c, x);
    const uint4 bits = from_floats(x);
    if (row >= 0) *reinterpret_cast<uint4*>(data + row + c) = bits;
    to_floats(bits, stored);
    to_floats(*reinterpret_cast<const uint4*>(with + r * WP + c), w);
    const float sum = piece_dot<kPieces>(w, stored);
    if (c == 0 && row >= 0) dots[dot_at(r)] = sum;
  }
}

}  // namespace combiner::attention::fused::cuda_detail
