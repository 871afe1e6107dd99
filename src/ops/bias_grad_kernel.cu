// The bias-gradient kernels of ops/bias_grad_kernel.h, line for line the CPU model's loops
// (ops/bias_grad_cpu.cpp). Memory bound: the first reads dy (and pre) once in 16-byte vectors, a
// warp's row segment 512 contiguous bytes of bfloat16, and writes d_pre with GELU and one row of
// partial sums per part; the second adds the [parts, cols] partial sums, a [32 columns x 32
// slices] CTA per 32 columns, as the LayerNorm's dweight are added.

#include <stdexcept>
#include <string>

#include "ops/bias_grad_kernel.h"
#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {
namespace {

constexpr int kThreads = 32 * kBiasWarps;

// A lane's kBiasVector neighbouring values, as floats, and back.
__device__ __forceinline__ void load_vector(const __nv_bfloat16* p, float (&v)[kBiasVector]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const unsigned words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // the lower half of a word is the first of its two values
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load_vector(const float* p, float (&v)[kBiasVector]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
// Stores v rounded to bfloat16, and leaves in v the values stored.
__device__ __forceinline__ void store_vector(__nv_bfloat16* p, float (&v)[kBiasVector]) {
  unsigned words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned lo = __bfloat16_as_ushort(__float2bfloat16(v[2 * i]));
    const unsigned hi = __bfloat16_as_ushort(__float2bfloat16(v[2 * i + 1]));
    words[i] = lo | (hi << 16);
    v[2 * i] = __uint_as_float(lo << 16);
    v[2 * i + 1] = __uint_as_float(hi << 16);
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
}
__device__ __forceinline__ void store_vector(float* p, float (&v)[kBiasVector]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// CTA (part p, column tile t): each warp sums its rows over the lane's 8 columns of the tile's 256
// (with GELU, first making and writing d_pre there), then the warps' sums are added in warp order
// into row p of the partial sums.
template <typename T, bool kGelu>
__global__ void __launch_bounds__(kThreads) bias_partial_kernel(const BiasGrad g) {
  __shared__ float sums[kBiasWarps][kBiasTile];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t tile = int64_t(blockIdx.y) * kBiasTile;
  const int64_t c = tile + lane * kBiasVector;  // cols is a multiple of 8: all 8 in, or none
  float acc[kBiasVector];
#pragma unroll
  for (int i = 0; i < kBiasVector; ++i) acc[i] = 0.f;
  if (c < g.cols) {
    const int64_t stride = int64_t(kBiasWarps) * g.parts;
#pragma unroll 4
    for (int64_t r = int64_t(blockIdx.x) * kBiasWarps + warp; r < g.rows; r += stride) {
      float d[kBiasVector];
      load_vector(static_cast<const T*>(g.dy) + r * g.cols + c, d);
      if (kGelu) {
        float x[kBiasVector];
        load_vector(static_cast<const T*>(g.pre) + r * g.cols + c, x);
#pragma unroll
        for (int i = 0; i < kBiasVector; ++i) d[i] *= gelu_grad(x[i]);
        store_vector(static_cast<T*>(g.d_pre) + r * g.cols + c, d);
      }
#pragma unroll
      for (int i = 0; i < kBiasVector; ++i) acc[i] += d[i];
    }
  }
#pragma unroll
  for (int i = 0; i < kBiasVector; ++i) sums[warp][lane * kBiasVector + i] = acc[i];
  __syncthreads();
  float* out = g.partial + int64_t(blockIdx.x) * g.cols + tile;
  for (int i = threadIdx.x; i < kBiasTile && tile + i < g.cols; i += kThreads) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kBiasWarps; ++w) s += sums[w][i];
    out[i] = s;
  }
}

// db[c]: column c of the [parts, cols] partial sums, by 32 slices of the parts (slice y takes
// parts y, y + 32, ...), then the slices in order.
__global__ void __launch_bounds__(1024) bias_reduce_kernel(const BiasGrad g) {
  __shared__ float slices[32][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (c < g.cols) {
#pragma unroll 8  // loads in flight: at most 1024 parts, 32 per thread
    for (int64_t p = threadIdx.y; p < g.parts; p += 32) s += g.partial[p * g.cols + c];
  }
  slices[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || c >= g.cols) return;
  float total = 0.f;
  for (int y = 0; y < 32; ++y) total += slices[y][threadIdx.x];
  g.dbias[c] = total;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

template <typename T>
void launch_partial(const BiasGrad& g, cudaStream_t s) {
  const dim3 grid(unsigned(g.parts), unsigned((g.cols + kBiasTile - 1) / kBiasTile));
  if (g.pre)
    COMBINER_LAUNCH(grid, kThreads, 0, s, bias_partial_kernel<T, true>)(g);
  else
    COMBINER_LAUNCH(grid, kThreads, 0, s, bias_partial_kernel<T, false>)(g);
}

}  // namespace
}  // namespace combiner::ops::cuda_detail

namespace combiner::ops {

void bias_grad_cuda(const BiasGrad& g, void* stream) {
  using namespace cuda_detail;
  if (!bias_grad_supported(g.cols))
    throw std::invalid_argument("bias gradient kernels: the width must be a multiple of " +
                                std::to_string(kBiasVector) + ", got " + std::to_string(g.cols));
  const auto s = static_cast<cudaStream_t>(stream);
  if (g.dtype == Dtype::kBFloat16)
    launch_partial<__nv_bfloat16>(g, s);
  else
    launch_partial<float>(g, s);
  check(cudaGetLastError(), "bias gradient (partial sums)");
  COMBINER_LAUNCH(unsigned((g.cols + 31) / 32), dim3(32, 32), 0, s, bias_reduce_kernel)(g);
  check(cudaGetLastError(), "bias gradient (the parts' sum)");
}

}  // namespace combiner::ops
