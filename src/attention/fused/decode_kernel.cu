// The decode kernel (decode_kernel.h), line for line the CPU model's loops (decode_cpu.cpp) over
// one CTA per (batch, head): the cache writes, then per plan
//   scores:  warp w takes terms w, w + 4, ...; its lanes read the key row (D floats, coalesced),
//            the dot product summed by shuffles; lane 0 stores scale * dot + bias;
//   softmax: the block's max and sum of exp(score - max), the weights kept over the scores;
//   values:  warp w takes the same terms again; lane l sums weight x value[l + 32c] for its
//            Dv / 32 columns; the four warps' sums are added in shared memory, divided by the
//            softmax's sum and added to the output (the plans' mean when there are two).
// Shared memory: q [D] + 4 x Dv + the widest plan's scores + 8 floats; at the 128-layer
// preset's D = Dv = 128 and 222 terms, 3.5 KB.
//
// Cost at that preset (64 images, 2 heads, L 3072, combiner-axial-vertical's 127 direct positions
// and 95 spans a step): each CTA reads 222 rows of 256 floats (227 KB), 29 MB a layer: ~6 us at an
// H200's ~4.8 TB/s, 0.8 ms for 128 layers, 2.4 s for the 3,072 steps of 64 images.
#include <cuda_runtime.h>

#include <cfloat>
#include <stdexcept>
#include <string>

#include "attention/fused/decode_kernel.h"
#include "attention/fused/kernel_launch.cuh"

namespace combiner::attention::fused {

namespace {

constexpr int kThreads = kDecodeWarps * 32;
constexpr int kValueChunks = int(kDecodeMaxValueDim / 32);

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// The block's sum or max of x (every thread gets it); `slots` holds 4 floats.
template <bool MAX>
__device__ float block_reduce(float x, float* slots) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = MAX ? warp_max(x) : warp_sum(x);
  if (lane == 0) slots[warp] = x;
  __syncthreads();
  float all = slots[0];
  for (int w = 1; w < kDecodeWarps; ++w) all = MAX ? fmaxf(all, slots[w]) : all + slots[w];
  return all;
}

__global__ void __launch_bounds__(kThreads) decode_step_kernel(const DecodeStep s) {
  extern __shared__ float smem[];
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, row = D + Dv;
  const int64_t bh = blockIdx.x, b = bh / s.heads, h = bh % s.heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float* q_s = smem;                            // [D]
  float* partial = q_s + D;                     // [4, Dv]
  float* scores = partial + kDecodeWarps * Dv;  // [terms]
  float* slots = scores + decode_terms(s);      // [2 x 4]
  const int64_t pos = *s.position;

  auto vec = [&](const Operand& x) {
    return static_cast<const float*>(x.data) + b * x.batch + h * x.head;
  };
  const float *q = vec(s.q), *k = vec(s.k), *v = vec(s.v);
  auto* kv_cache = static_cast<float*>(s.kv_cache);
  float* kv_row = kv_cache + (bh * L + pos) * row;
  for (int64_t d = tid; d < D; d += kThreads) {
    q_s[d] = q[d];
    kv_row[d] = k[d];
    if (s.q_cache) static_cast<float*>(s.q_cache)[(bh * L + pos) * D + d] = q[d];
  }
  for (int64_t d = tid; d < Dv; d += kThreads) kv_row[D + d] = v[d];
  __syncthreads();  // the new row (read below when listed) and q_s

  float* out = static_cast<float*>(s.out) + bh * Dv;
  for (int p = 0; p < s.plans; ++p) {
    const DecodePlan& plan = s.plan[p];
    const int64_t n = plan.direct_count + plan.span_count;
    auto term = [&](int64_t t) -> const float* {
      if (t < plan.direct_count) return kv_cache + (bh * L + plan.direct[t]) * row;
      return static_cast<const float*>(plan.spans) +
             (bh * plan.span_rows + plan.slots[t - plan.direct_count]) * row;
    };
    for (int64_t t = warp; t < n; t += kDecodeWarps) {
      const float* key = term(t);
      float dot = 0.f;
      for (int64_t d = lane; d < D; d += 32) dot += q_s[d] * key[d];
      dot = warp_sum(dot);
      if (lane == 0) scores[t] = dot * float(s.scale) + plan.bias[t];
    }
    __syncthreads();
    float max = -FLT_MAX;
    for (int64_t t = tid; t < n; t += kThreads) max = fmaxf(max, scores[t]);
    max = block_reduce<true>(max, slots);
    float total = 0.f;
    for (int64_t t = tid; t < n; t += kThreads) {
      const float e = expf(scores[t] - max);
      scores[t] = e;
      total += e;
    }
    total = block_reduce<false>(total, slots + kDecodeWarps);  // also orders the weights' stores

    float acc[kValueChunks];
    for (int c = 0; c < kValueChunks; ++c) acc[c] = 0.f;
    for (int64_t t = warp; t < n; t += kDecodeWarps) {
      const float weight = scores[t];
      const float* value = term(t) + D;
#pragma unroll
      for (int c = 0; c < kValueChunks; ++c) {
        const int64_t d = lane + 32 * c;
        if (d < Dv) acc[c] += weight * value[d];
      }
    }
#pragma unroll
    for (int c = 0; c < kValueChunks; ++c) {
      const int64_t d = lane + 32 * c;
      if (d < Dv) partial[warp * Dv + d] = acc[c];
    }
    __syncthreads();
    for (int64_t d = tid; d < Dv; d += kThreads) {
      float o = 0.f;
      for (int w = 0; w < kDecodeWarps; ++w) o += partial[w * Dv + d];
      o /= total;
      out[d] = p == 0 ? o : out[d] + o;
    }
    __syncthreads();  // scores, partial and slots are rewritten by the next plan
  }
  if (s.plans > 1)
    for (int64_t d = tid; d < Dv; d += kThreads) out[d] /= float(s.plans);
}

}  // namespace

void decode_step_cuda(const DecodeStep& s, void* stream) {
  if (s.dtype != Dtype::kFloat32 || s.value_dim > kDecodeMaxValueDim ||
      decode_smem_bytes(s) > kDecodeMaxSmem)
    throw std::invalid_argument("decode step kernel: float32, Dv <= 256 and at most " +
                                std::to_string(kDecodeMaxSmem) + " bytes of shared memory");
  const int64_t ctas = s.batch * s.heads;
  if (ctas == 0) return;
  // Raised once per device to the most any step asks for (the first step runs eagerly, before a
  // graph captures the later ones), so the launch below never raises it again.
  const char* what = "decode step kernel";
  cuda_detail::raise_smem_limit(decode_step_kernel, size_t(kDecodeMaxSmem), what);
  cuda_detail::launch(
      decode_step_kernel, dim3(unsigned(ctas)), size_t(decode_smem_bytes(s)), stream, what, s);
}

}  // namespace combiner::attention::fused
