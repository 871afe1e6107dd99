// The weight-cast kernel of ops/weight_cast_kernel.h, the CPU model's loop
// (ops/weight_cast_cpu.cpp) a thread per kCastVector outputs. Memory bound: each float read once,
// each bfloat16 written once.

#include <stdexcept>
#include <string>

#include "ops/kernel_values.cuh"
#include "ops/weight_cast_kernel.h"
#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {
namespace {

__global__ void __launch_bounds__(kCastThreads) weight_cast_kernel(const WeightCast w) {
  const int64_t g = int64_t(blockIdx.x) * kCastThreads + threadIdx.x;
  if (g >= w.groups) return;
  const int64_t e = g * kCastVector;
  const int64_t *first = w.table + w.tensors, *numel = w.table + 2 * w.tensors;
  const int64_t t = cast_tensor_of(first, w.tensors, e);
  const float* __restrict__ source = reinterpret_cast<const float*>(w.table[t]);
  __nv_bfloat16* __restrict__ out = reinterpret_cast<__nv_bfloat16*>(w.out) + e;
  const int64_t i = e - first[t];
#pragma unroll
  for (int k = 0; k < kCastVector; ++k) store_float(out, k, i + k < numel[t] ? source[i + k] : 0.f);
}

}  // namespace
}  // namespace combiner::ops::cuda_detail

namespace combiner::ops {

void weight_cast_cuda(const WeightCast& w, void* stream) {
  using namespace cuda_detail;
  if (w.groups == 0) return;
  const auto blocks = unsigned((w.groups + kCastThreads - 1) / kCastThreads);
  COMBINER_LAUNCH(blocks, kCastThreads, 0, static_cast<cudaStream_t>(stream), weight_cast_kernel)
  (w);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("weight cast: ") + cudaGetErrorString(status));
}

}  // namespace combiner::ops
