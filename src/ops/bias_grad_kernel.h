// A linear layer's bias gradient, db = the column sums of its output gradient dy [rows, cols], in
// a fixed order and in float32, optionally with the GELU after the layer undone in the same pass:
//
//   plain:  db[c] = sum over rows r of dy[r, c]
//   GELU:   d_pre[r, c] = dy[r, c] * GELU'(pre[r, c])    (erf GELU; written in dy's dtype)
//           db[c] = sum over rows r of d_pre[r, c]       (the values written, as rounded)
//
// In LibTorch's backward of linear (+ GELU) under bf16 autocast these are a GELU backward, a
// column sum that reads d_pre again, and a cast of the bf16 sum to the float32 bias: three
// launches and two reads of the largest tensor of the MLP, where these kernels are two launches
// and one read. The sums go as the LayerNorm's dweight (ops/layer_norm_kernel.h) do: the first
// launch gives each part (a CTA per part and 256 columns) the rows w + kBiasWarps * p, then every
// kBiasWarps * parts rows, for its warp w, a lane summing 8 neighbouring columns, and writes the
// part's warps' sums, added in warp order; the second adds the parts, 32 slices and then the
// slices, in order. The parts are fixed by the shape alone, so the rounding is the same on every
// GPU. Two implementations read these descriptors: the CPU model (bias_grad_cpu.cpp: plain loops,
// the same order; tests) and the CUDA kernels (bias_grad_kernel.cu).
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/layer_norm_kernel.h"

namespace combiner::ops {

constexpr int kBiasWarps = 8;                    // warps per CTA, each on its own rows
constexpr int kBiasVector = 8;                   // columns per lane: 16 bytes of bfloat16
constexpr int64_t kBiasTile = 32 * kBiasVector;  // columns per CTA: 256
constexpr int64_t kBiasMaxParts = 1024;

// The output widths the kernels take: a multiple of kBiasVector (each lane's columns are one
// aligned vector).
COMBINER_OPS_HD bool bias_grad_supported(int64_t cols) {
  return cols > 0 && cols % kBiasVector == 0;
}
// The parts (ops/layer_norm_kernel.h's row_parts), and the part whose CTAs take row r.
COMBINER_OPS_HD int64_t bias_grad_parts(int64_t rows) {
  return row_parts(rows, kBiasWarps, kBiasMaxParts);
}
COMBINER_OPS_HD int64_t bias_grad_part_of_row(int64_t r, int64_t parts) {
  return part_of_row(r, kBiasWarps, parts);
}

struct BiasGrad {
  int64_t rows = 0, cols = 0, parts = 1;
  const void* dy = nullptr;  // [rows, cols] in dtype, contiguous, 16-byte aligned
  Dtype dtype = Dtype::kFloat32;
  // With GELU: pre (GELU's input, as dy) is read and d_pre (as dy) written, and summed.
  const void* pre = nullptr;
  void* d_pre = nullptr;
  float* partial = nullptr;  // [parts, cols]
  float* dbias = nullptr;    // [cols]
};

// Kernels launched on a GPU.
constexpr int kBiasGradLaunches = 2;

// GELU's derivative (erf), as LibTorch's gelu_backward computes it in float32.
COMBINER_OPS_HD float gelu_grad(float x) {
  const float cdf = 0.5f * (1.f + erff(x * 0.70710678118654752f));
  const float pdf = expf(-0.5f * x * x) * 0.39894228040143268f;  // 1 / sqrt(2 pi)
  return cdf + x * pdf;
}

void bias_grad_cpu(const BiasGrad& g);
// CUDA builds (and the emulator's); `stream` is a cudaStream_t.
void bias_grad_cuda(const BiasGrad& g, void* stream);

}  // namespace combiner::ops
