// The loss kernels of ops/cross_entropy_kernel.h, line for line the CPU model's loops
// (ops/cross_entropy_cpu.cpp). Memory bound: a warp owns a row, each of its loads 32 neighbouring
// logits; the forward reads the row twice (its max, then its exponentials: the second read from
// L1) and writes two floats, the backward reads it once and writes its gradient.

#include <cmath>
#include <stdexcept>
#include <string>

#include "ops/cross_entropy_kernel.h"
#include "ops/kernel_values.cuh"
#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {
namespace {

constexpr int kThreads = 32 * kEntropyWarps;

__device__ __forceinline__ float quiet_nan() {
  return __uint_as_float(0x7fc00000u);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) entropy_forward_kernel(const EntropyForward f) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kEntropyWarps + threadIdx.x / 32;
  if (r >= f.rows) return;  // the whole warp: rows are per warp
  const T* __restrict__ z = static_cast<const T*>(f.logits) + r * f.vocab;
  float m = __uint_as_float(0xff800000u);  // -inf
  for (int64_t c = lane; c < f.vocab; c += 32) m = fmaxf(m, load_float(z, c));
  m = warp_max(m);
  float s = 0.f;
  for (int64_t c = lane; c < f.vocab; c += 32) s += expf(load_float(z, c) - m);
  const float log_s = logf(warp_sum(s));
  if (lane != 0) return;
  const int64_t t = entropy_target(f.targets, f.target_type, r, f.vocab);
  f.lse[r] = m + log_s;
  f.bits[r] = t < 0 ? quiet_nan() : ((m - load_float(z, t)) + log_s) * kLog2e;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) entropy_backward_kernel(const EntropyBackward b) {
  const int lane = threadIdx.x % 32;
  const int64_t r = int64_t(blockIdx.x) * kEntropyWarps + threadIdx.x / 32;
  if (r >= b.rows) return;
  const int64_t t = entropy_target(b.targets, b.target_type, r, b.vocab);
  const float g = t < 0 ? quiet_nan() : b.grad[r * b.grad_stride] * b.grad_scale * kLog2e;
  const float lse = b.lse[r];
  const T* __restrict__ z = static_cast<const T*>(b.logits) + r * b.vocab;
  T* __restrict__ dz = static_cast<T*>(b.dlogits) + r * b.vocab;
  for (int64_t c = lane; c < b.vocab; c += 32) {
    const float p = expf(load_float(z, c) - lse);
    store_float(dz, c, g * (c == t ? p - 1.f : p));
  }
}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

unsigned row_blocks(int64_t rows) {
  return unsigned((rows + kEntropyWarps - 1) / kEntropyWarps);
}

}  // namespace
}  // namespace combiner::ops::cuda_detail

namespace combiner::ops {

void entropy_forward_cuda(const EntropyForward& f, void* stream) {
  using namespace cuda_detail;
  if (f.rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (f.dtype == Dtype::kBFloat16)
    COMBINER_LAUNCH(row_blocks(f.rows), kThreads, 0, s, entropy_forward_kernel<__nv_bfloat16>)(f);
  else
    COMBINER_LAUNCH(row_blocks(f.rows), kThreads, 0, s, entropy_forward_kernel<float>)(f);
  check(cudaGetLastError(), "loss forward");
}

void entropy_backward_cuda(const EntropyBackward& b, void* stream) {
  using namespace cuda_detail;
  if (b.rows == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (b.dtype == Dtype::kBFloat16)
    COMBINER_LAUNCH(row_blocks(b.rows), kThreads, 0, s, entropy_backward_kernel<__nv_bfloat16>)(b);
  else
    COMBINER_LAUNCH(row_blocks(b.rows), kThreads, 0, s, entropy_backward_kernel<float>)(b);
  check(cudaGetLastError(), "loss backward");
}

}  // namespace combiner::ops
