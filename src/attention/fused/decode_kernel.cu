// The decode kernel (decode_kernel.h), the CPU model's loops (decode_cpu.cpp) over one CTA per
// (batch, head), 8 warps:
//   writes:  the new position's q (when kept), k and v into the caches; q into registers;
//   rows:    the step's terms listed in shared memory as one int each (decode_row_code: a cache
//            position, or -1 - a span slot), so no term's row load waits on its index's load;
//   scores:  warp w takes terms 4w .. 4w + 3, then 32 on (decode_warp_of); its lanes load the 4
//            key rows (D / 32 floats each, coalesced) before summing any, then shuffle-sum the 4
//            dot products; lane 0 stores scale * dot + bias;
//   softmax: the block's max and sum of exp(score - max), the weights kept over the scores;
//   values:  warp w takes the same terms again; lane l sums weight x value[l + 32c] for its
//            Dv / 32 columns over the 4 rows at a time; the 8 warps' sums are added in shared
//            memory, divided by the softmax's sum and added to the output (the plans' mean when
//            there are two).
// Shared memory: 8 x Dv + 2 x the widest plan's terms + 16 floats; at the 128-layer preset's
// D = Dv = 128 and 222 terms, 5.9 KB. The caches' element type C is float or bfloat16 (read into
// float32; the new position's q, k and v rounded as they are written, q for its own scores too).
//
// Cost at that preset (64 images, 2 heads, L 3072, combiner-axial-vertical's 127 direct positions
// and 95 spans a step): each CTA reads 222 rows of 256 floats (227 KB), twice (keys, then values:
// the second read mostly from L2), 29 MB a layer from memory: ~6 us at an H200's ~4.8 TB/s,
// 0.8 ms for 128 layers, 2.4 s for the 3,072 steps of 64 images. One CTA per SM (128 CTAs) needs
// ~20 KB of loads in flight each to reach that: 8 warps x 4 rows x 512 B of keys is 16 KB. With
// bfloat16 caches, half the bytes (and half the memory: 38.7 GB for those 64 images' caches).

#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/fused/decode_kernel.h"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_reduce.cuh"
#include "attention/fused/kernel_scalar.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused {

namespace {

constexpr int kThreads = kDecodeWarps * 32;
// Lanes hold a row's D (or Dv) values 32 apart: at most kChunks each.
constexpr int kChunks = int(kDecodeMaxDim / 32);
static_assert(kDecodeMaxValueDim == kDecodeMaxDim, "keys and values share the loads' shape");
constexpr int kInFlight = kDecodeTermsInFlight;

// A cache element into float32, and a float32 into one (rounded to nearest even).
using cuda_detail::scalar_as;
using cuda_detail::scalar_float;

template <typename C>
__global__ void __launch_bounds__(kThreads, 1) decode_step_kernel(const DecodeStep s) {
  COMBINER_DYNAMIC_SHARED(float, smem);
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, width = D + Dv;
  const int64_t bh = blockIdx.x, b = bh / s.heads, h = bh % s.heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t terms = decode_terms(s);
  float* partial = smem;                               // [8, Dv]
  float* scores = partial + kDecodeWarps * Dv;         // [terms]
  int* rows = reinterpret_cast<int*>(scores + terms);  // [terms]
  float* slots = scores + 2 * terms;                   // [2 x 8]
  const int64_t pos = *s.position;

  auto vec = [&](const Operand& x) {
    return static_cast<const float*>(x.data) + b * x.batch + h * x.head;
  };
  const float *q = vec(s.q), *k = vec(s.k), *v = vec(s.v);
  const auto* kv_cache = static_cast<const C*>(s.kv_cache) + bh * L * width;
  C* kv_row = static_cast<C*>(s.kv_cache) + (bh * L + pos) * width;
  for (int64_t d = tid; d < D; d += kThreads) {
    kv_row[d] = scalar_as<C>(k[d]);
    if (s.q_cache) static_cast<C*>(s.q_cache)[(bh * L + pos) * D + d] = scalar_as<C>(q[d]);
  }
  for (int64_t d = tid; d < Dv; d += kThreads) kv_row[D + d] = scalar_as<C>(v[d]);
  float q_r[kChunks];  // as the cache holds it
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
    q_r[c] = lane + 32 * c < D ? scalar_float(scalar_as<C>(q[lane + 32 * c])) : 0.f;

  float* out = static_cast<float*>(s.out) + bh * Dv;
  for (int p = 0; p < s.plans; ++p) {
    const DecodePlan& plan = s.plan[p];
    const int64_t n = plan.direct_count + plan.span_count;
    const auto* spans = static_cast<const float*>(plan.spans) + bh * plan.span_rows * width;
    for (int64_t t = tid; t < n; t += kThreads) rows[t] = decode_row_code(plan, t);
    __syncthreads();  // the rows, and the new cache row (read below when listed)
    auto row = [&](int64_t t) { return decode_row(rows[t], kv_cache, spans, width); };
    // Element i of a row (the term's, the same for the whole warp: no divergence).
    auto at = [](const DecodeRow<C, float>& r, int64_t i) {
      return r.cache ? scalar_float(r.cache[i]) : r.span[i];
    };
    // Terms t0 .. t0 + 3: elements offset + lane + 32 c (< offset + count) of their rows, every
    // load issued before any is used; zeros past the list or the row.
    auto load_terms =
        [&](int64_t t0, int64_t offset, int64_t count, float(&out)[kInFlight][kChunks]) {
#pragma unroll
          for (int j = 0; j < kInFlight; ++j) {
            const bool real = t0 + j < n;
            const auto r = real ? row(t0 + j) : DecodeRow<C, float>{nullptr, nullptr};
#pragma unroll
            for (int c = 0; c < kChunks; ++c)
              out[j][c] = real && lane + 32 * c < count ? at(r, offset + lane + 32 * c) : 0.f;
          }
        };

    for (int64_t t0 = warp * kInFlight; t0 < n; t0 += kDecodeWarps * kInFlight) {
      float key[kInFlight][kChunks];
      load_terms(t0, 0, D, key);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) dot += q_r[c] * key[j][c];
        dot = cuda_detail::warp_sum(dot);
        if (lane == 0 && t0 + j < n) scores[t0 + j] = dot * float(s.scale) + plan.bias[t0 + j];
      }
    }
    __syncthreads();
    float max = -FLT_MAX;
    for (int64_t t = tid; t < n; t += kThreads) max = fmaxf(max, scores[t]);
    max = cuda_detail::block_reduce<true, kDecodeWarps>(max, slots);
    float total = 0.f;
    for (int64_t t = tid; t < n; t += kThreads) {
      const float e = expf(scores[t] - max);
      scores[t] = e;
      total += e;
    }
    total = cuda_detail::block_reduce<false, kDecodeWarps>(
        total, slots + kDecodeWarps);  // also orders the weights' stores

    float acc[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[c] = 0.f;
    for (int64_t t0 = warp * kInFlight; t0 < n; t0 += kDecodeWarps * kInFlight) {
      float value[kInFlight][kChunks];
      load_terms(t0, D, Dv, value);
#pragma unroll
      for (int j = 0; j < kInFlight; ++j) {
        const float weight = t0 + j < n ? scores[t0 + j] : 0.f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) acc[c] += weight * value[j][c];
      }
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      if (lane + 32 * c < Dv) partial[warp * Dv + lane + 32 * c] = acc[c];
    __syncthreads();
    for (int64_t d = tid; d < Dv; d += kThreads) {
      float o = 0.f;
      for (int w = 0; w < kDecodeWarps; ++w) o += partial[w * Dv + d];
      o /= total;
      out[d] = p == 0 ? o : out[d] + o;
    }
    __syncthreads();  // rows, scores, partial and slots are rewritten by the next plan
  }
  if (s.plans > 1)
    for (int64_t d = tid; d < Dv; d += kThreads) out[d] /= float(s.plans);
}

template <typename C>
void launch_decode(const DecodeStep& s, cudaStream_t stream) {
  // Raised once per device to the most any step asks for (the first step runs eagerly, before a
  // graph captures the later ones).
  const char* what = "decode step kernel";
  cuda_detail::raise_smem_limit(decode_step_kernel<C>, size_t(kDecodeMaxSmem), what);
  COMBINER_LAUNCH(unsigned(s.batch * s.heads),
                  kThreads,
                  size_t(decode_smem_bytes(s)),
                  stream,
                  decode_step_kernel<C>)
  (s);
  cuda_detail::check(cudaGetLastError(), what);
}

}  // namespace

void decode_step_cuda(const DecodeStep& s, void* stream) {
  if (s.dtype != Dtype::kFloat32 || !decode_dtypes_supported(s) || s.dim > kDecodeMaxDim ||
      s.value_dim > kDecodeMaxValueDim || decode_smem_bytes(s) > kDecodeMaxSmem ||
      s.length > (int64_t(1) << 30))
    throw std::invalid_argument(
        "decode step kernel: float32 (caches float32 or bfloat16), D and Dv <= 256 and at most " +
        std::to_string(kDecodeMaxSmem) + " bytes of shared memory");
  if (s.batch * s.heads == 0) return;
  const auto on = static_cast<cudaStream_t>(stream);
  if (s.cache == Dtype::kBFloat16)
    launch_decode<__nv_bfloat16>(s, on);
  else
    launch_decode<float>(s, on);
}

}  // namespace combiner::attention::fused
