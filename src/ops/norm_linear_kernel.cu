// The LayerNorm-and-linear kernel of ops/norm_linear_kernel.h, the CPU model's loops
// (norm_linear_cpu.cpp) over CTAs of 16 rows x 64 outputs, 8 warps:
//   norm:   warp w takes rows 2w and 2w + 1: the sum x + residual into shared memory (the first
//           column block also writes it out), its mean and variance by warp sums, then the
//           normalised row in place;
//   linear: per chunk of 32 columns, the CTA stages W's 64 rows of it (each 128 contiguous bytes)
//           and thread t sums row t / 16 against outputs t % 16 + 16 j, j < 4 (so a warp's 16
//           output rows fall in 16 banks);
//   out:    + bias, GELU where asked, written as 16 contiguous floats a half-warp.
// Cost at the 128-layer preset's decode step (64 images, width 256, qkv's 768 and the MLP's 512
// outputs): 48 and 32 CTAs, each reading 64 KB of W (from memory once, from L2 by the other row
// blocks) and 16 rows of x: a few microseconds, about what each of the launches it replaces takes.

#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "ops/kernel_values.cuh"
#include "ops/norm_linear_kernel.h"
#include "simt/cuda.h"

namespace combiner::ops::cuda_detail {
namespace {

constexpr int kThreads = 256;
constexpr int kOutputsPerThread = kNormLinearCols / 16;
static_assert(kThreads == kNormLinearRows * 16, "a thread per row and 16th of the outputs");

__global__ void __launch_bounds__(kThreads) norm_linear_kernel(const NormLinear n) {
  COMBINER_DYNAMIC_SHARED(float, smem);
  const int W = int(n.width), pitch = W + 1;
  float* xn = smem;                            // [16][W + 1]
  float* ws = smem + kNormLinearRows * pitch;  // [64][33]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t r0 = int64_t(blockIdx.y) * kNormLinearRows,
                o0 = int64_t(blockIdx.x) * kNormLinearCols;

  for (int i = 0; i < kNormLinearRows / 8; ++i) {
    const int m = warp * (kNormLinearRows / 8) + i;
    const int64_t r = r0 + m;
    float* row = xn + m * pitch;
    if (r >= n.rows) {  // past the last row: zeros, summed but never written
      for (int c = lane; c < W; c += 32) row[c] = 0.f;
      continue;
    }
    float total = 0.f;
    for (int c = lane; c < W; c += 32) {
      float v = n.x[r * W + c];
      if (n.residual) {
        v += n.residual[r * W + c];
        if (blockIdx.x == 0) n.sum[r * W + c] = v;
      }
      row[c] = v;
      total += v;
    }
    const float mean = warp_sum(total) / float(W);
    float var = 0.f;
    for (int c = lane; c < W; c += 32) var += (row[c] - mean) * (row[c] - mean);
    const float rstd = rsqrtf(warp_sum(var) / float(W) + n.eps);
    for (int c = lane; c < W; c += 32)
      row[c] = (row[c] - mean) * rstd * n.norm_weight[c] + n.norm_bias[c];
  }

  const int m = tid / 16, o_lane = tid % 16;
  float acc[kOutputsPerThread] = {};
  for (int k0 = 0; k0 < W; k0 += kNormLinearChunk) {
    __syncthreads();  // the rows are normalised; the last chunk's W is read
    for (int e = tid; e < kNormLinearCols * kNormLinearChunk; e += kThreads) {
      const int i = e / kNormLinearChunk, k = e % kNormLinearChunk;
      const int64_t o = o0 + i;
      ws[i * (kNormLinearChunk + 1) + k] = o < n.out ? n.weight[o * W + k0 + k] : 0.f;
    }
    __syncthreads();
    const float* a = xn + m * pitch + k0;
#pragma unroll 8
    for (int k = 0; k < kNormLinearChunk; ++k) {
#pragma unroll
      for (int j = 0; j < kOutputsPerThread; ++j)
        acc[j] += a[k] * ws[(o_lane + 16 * j) * (kNormLinearChunk + 1) + k];
    }
  }

  const int64_t r = r0 + m;
  if (r >= n.rows) return;
#pragma unroll
  for (int j = 0; j < kOutputsPerThread; ++j) {
    const int64_t o = o0 + o_lane + 16 * j;
    if (o >= n.out) continue;
    float v = acc[j] + (n.bias ? n.bias[o] : 0.f);
    if (n.gelu) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
    n.y[r * n.out + o] = v;
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace
}  // namespace combiner::ops::cuda_detail

namespace combiner::ops {

void norm_linear_cuda(const NormLinear& n, void* stream) {
  using namespace cuda_detail;
  if (!norm_linear_supported(n.width))
    throw std::invalid_argument("norm-linear kernel: width must be a multiple of 32 up to " +
                                std::to_string(kNormMaxWidth) + ", got " + std::to_string(n.width));
  if (n.rows == 0 || n.out == 0) return;
  const size_t smem = size_t(norm_linear_smem_bytes(n.width));
  const char* what = "norm-linear kernel";
  // The limit is an attribute of the kernel on a device: raised there once, before a capture.
  static std::mutex mutex;
  static std::set<int> raised;
  if (smem > 48 * 1024) {
    int device = 0;
    check(cudaGetDevice(&device), what);
    const std::lock_guard<std::mutex> lock(mutex);
    if (!raised.count(device)) {
      check(cudaFuncSetAttribute(norm_linear_kernel,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(norm_linear_smem_bytes(kNormMaxWidth))),
            what);
      raised.insert(device);
    }
  }
  const dim3 grid(unsigned((n.out + kNormLinearCols - 1) / kNormLinearCols),
                  unsigned((n.rows + kNormLinearRows - 1) / kNormLinearRows));
  COMBINER_LAUNCH(grid, kThreads, smem, static_cast<cudaStream_t>(stream), norm_linear_kernel)(n);
  check(cudaGetLastError(), what);
}

}  // namespace combiner::ops
