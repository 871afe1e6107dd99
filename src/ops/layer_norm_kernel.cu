// The LayerNorm kernels of ops/layer_norm_kernel.h, line for line the CPU model's loops
// (ops/layer_norm_cpu.cpp). A warp owns a row: lane l holds columns l, l + 32, ... in registers
// (V of them, the width rounded up to a power of two over 32: one instance per V), so a row is
// read once, and every load of a warp is 128 contiguous bytes. Memory bound: the forward reads x
// and writes y; the backward reads x and dy and writes dx, and its parts' partial sums of
// dweight and dbias (kNormMaxParts x 2 x W floats at most) are added by a second launch, a
// [32 columns x 32 slices] CTA per 32 columns. LibTorch's LayerNorm on a GPU at width 256 spends
// ten times the bytes' time in its dweight/dbias kernel (GammaBetaBackward) alone. With a
// residual the forward also reads it and writes the sum, the backward also reads d_sum and
// writes d_residual: the add, the gradients' sum and its cast, each one more pass otherwise.

#include <stdexcept>
#include <string>

#include "ops/kernel_values.cuh"
#include "ops/layer_norm_kernel.h"
#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {
namespace {

constexpr int kThreads = 32 * kNormWarps;

// v[i] += residual[lane + 32 i] for the row's columns.
template <int V, typename TR>
__device__ __forceinline__ void add_row(float (&v)[V],
                                        const TR* __restrict__ residual,
                                        int lane,
                                        int W) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = lane + 32 * i;
    if (c < W) v[i] += load_float(residual, c);
  }
}

template <int V, typename TY>
__global__ void __launch_bounds__(kThreads) norm_forward_kernel(const NormForward f) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kNormWarps + threadIdx.x / 32;
  if (r >= f.rows) return;
  const int W = int(f.width);
  const float* __restrict__ x = f.x + r * W;
  float v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = lane + 32 * i;
    v[i] = c < W ? x[c] : 0.f;
  }
  if (f.residual) {  // the row is x + residual, kept as the sum
    if (f.residual_dtype == Dtype::kBFloat16)
      add_row<V>(v, static_cast<const __nv_bfloat16*>(f.residual) + r * W, lane, W);
    else
      add_row<V>(v, static_cast<const float*>(f.residual) + r * W, lane, W);
    float* __restrict__ s = f.sum + r * W;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = lane + 32 * i;
      if (c < W) s[c] = v[i];
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) sum += v[i];
  const float mean = warp_sum(sum) / float(W);
  float var = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = lane + 32 * i;
    const float d = c < W ? v[i] - mean : 0.f;
    var += d * d;
  }
  const float rstd = rsqrtf(warp_sum(var) / float(W) + f.eps);
  TY* __restrict__ y = static_cast<TY*>(f.y) + r * W;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = lane + 32 * i;
    if (c < W) store_float(y, c, (v[i] - mean) * rstd * f.weight[c] + f.bias[c]);
  }
  if (lane == 0) {
    f.mean[r] = mean;
    f.rstd[r] = rstd;
  }
}

template <int V, typename TD>
__global__ void __launch_bounds__(kThreads) norm_backward_kernel(const NormBackward b) {
  __shared__ float sums[kNormWarps][2][V * 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int W = int(b.width);
  const float inv_w = 1.f / float(W);
  float w[V], dw[V], db[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int c = lane + 32 * i;
    w[i] = c < W ? b.weight[c] : 0.f;
    dw[i] = db[i] = 0.f;
  }
  const int64_t stride = int64_t(kNormWarps) * b.parts;
  for (int64_t r = int64_t(blockIdx.x) * kNormWarps + warp; r < b.rows; r += stride) {
    const float* __restrict__ x = b.x + r * W;
    const TD* __restrict__ dy = static_cast<const TD*>(b.dy) + r * W;
    const float mean = b.mean[r], rstd = b.rstd[r];
    float xh[V], g[V], extra[V], sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int i = 0; i < V; ++i) {  // the sum's gradient from its other readers, if any
      const int c = lane + 32 * i;
      extra[i] = b.d_sum && c < W ? b.d_sum[r * W + c] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = lane + 32 * i;
      const float d = c < W ? load_float(dy, c) : 0.f;
      xh[i] = c < W ? (x[c] - mean) * rstd : 0.f;
      g[i] = d * w[i];
      sum_g += g[i];
      sum_gx += g[i] * xh[i];
      dw[i] += d * xh[i];
      db[i] += d;
    }
    const float a = warp_sum(sum_g) * inv_w, bx = warp_sum(sum_gx) * inv_w;
    float* __restrict__ dx = b.dx + r * W;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const int c = lane + 32 * i;
      const float d = rstd * (g[i] - a - xh[i] * bx) + extra[i];
      if (c < W) dx[c] = d;
      if (c < W && b.d_residual) {
        if (b.residual_dtype == Dtype::kBFloat16)
          store_float(static_cast<__nv_bfloat16*>(b.d_residual) + r * W, c, d);
        else
          store_float(static_cast<float*>(b.d_residual) + r * W, c, d);
      }
    }
  }
  // The CTA's warps, added in warp order: one row of partial sums per part.
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sums[warp][0][lane + 32 * i] = dw[i];
    sums[warp][1][lane + 32 * i] = db[i];
  }
  __syncthreads();
  float* out = b.partial + int64_t(blockIdx.x) * 2 * W;
  for (int i = threadIdx.x; i < 2 * W; i += kThreads) {
    const int which = i / W, c = i % W;
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < kNormWarps; ++k) s += sums[k][which][c];
    out[i] = s;
  }
}

// dweight and dbias: column i of the [parts, 2W] partial sums, by 32 slices of the parts (slice
// y takes parts y, y + 32, ...), then the slices in order.
__global__ void __launch_bounds__(1024) norm_reduce_kernel(const NormBackward b) {
  __shared__ float slices[32][33];
  const int64_t W2 = 2 * b.width;
  const int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (i < W2) {
#pragma unroll 8  // loads in flight: at most 1024 parts, 32 per thread
    for (int64_t p = threadIdx.y; p < b.parts; p += 32) s += b.partial[p * W2 + i];
  }
  slices[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || i >= W2) return;
  float total = 0.f;
  for (int y = 0; y < 32; ++y) total += slices[y][threadIdx.x];
  if (i < b.width)
    b.dweight[i] = total;
  else
    b.dbias[i - b.width] = total;
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// fn(std::integral_constant<int, V>) for the smallest V in 1, 2, 4, 8, 16, 32 with 32 V >= width.
template <typename Fn>
void with_columns_per_lane(int64_t width, Fn&& fn) {
  if (!norm_width_supported(width))
    throw std::invalid_argument("layer norm kernels: width must be a multiple of 32 up to " +
                                std::to_string(kNormMaxWidth) + ", got " + std::to_string(width));
  const int64_t v = (width + 31) / 32;
  if (v <= 1) return fn(std::integral_constant<int, 1>{});
  if (v <= 2) return fn(std::integral_constant<int, 2>{});
  if (v <= 4) return fn(std::integral_constant<int, 4>{});
  if (v <= 8) return fn(std::integral_constant<int, 8>{});
  if (v <= 16) return fn(std::integral_constant<int, 16>{});
  return fn(std::integral_constant<int, 32>{});
}

}  // namespace
}  // namespace combiner::ops::cuda_detail

namespace combiner::ops {

void norm_forward_cuda(const NormForward& f, void* stream) {
  using namespace cuda_detail;
  if (f.rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(unsigned((f.rows + kNormWarps - 1) / kNormWarps));
  with_columns_per_lane(f.width, [&](auto v) {
    constexpr int V = decltype(v)::value;
    if (f.y_dtype == Dtype::kBFloat16)
      COMBINER_LAUNCH(grid, kThreads, 0, s, norm_forward_kernel<V, __nv_bfloat16>)(f);
    else
      COMBINER_LAUNCH(grid, kThreads, 0, s, norm_forward_kernel<V, float>)(f);
  });
  check(cudaGetLastError(), "layer norm forward");
}

void norm_backward_cuda(const NormBackward& b, void* stream) {
  using namespace cuda_detail;
  const auto s = static_cast<cudaStream_t>(stream);
  with_columns_per_lane(b.width, [&](auto v) {
    constexpr int V = decltype(v)::value;
    if (b.dy_dtype == Dtype::kBFloat16)
      COMBINER_LAUNCH(unsigned(b.parts), kThreads, 0, s, norm_backward_kernel<V, __nv_bfloat16>)(b);
    else
      COMBINER_LAUNCH(unsigned(b.parts), kThreads, 0, s, norm_backward_kernel<V, float>)(b);
  });
  check(cudaGetLastError(), "layer norm backward");
  COMBINER_LAUNCH(unsigned((2 * b.width + 31) / 32), dim3(32, 32), 0, s, norm_reduce_kernel)(b);
  check(cudaGetLastError(), "layer norm backward (dweight, dbias)");
}

}  // namespace combiner::ops
