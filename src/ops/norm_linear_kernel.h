// A LayerNorm (after an optional residual add) and the linear layer that reads it, in one kernel,
// for the few rows of a decode step (a row per image): in a captured 128-layer sampling step each
// layer's two LayerNorms, the two linears after them and the GELU are otherwise five launches of
// a few microseconds each, mostly latency. float32 throughout (sampling runs the model in it).
//
//   s  = x (+ residual)                                  written to `sum` when there is a residual
//   xn = (s - mean) * rstd * norm_weight + norm_bias     the LayerNorm kernels' formulas
//   y  = act(xn W^T + b)                                 act: identity, or GELU (erf)
//
// Two implementations read these descriptors: a CPU model (norm_linear_cpu.cpp: plain loops,
// the same formulas; tests, and the CPU's fused decode path) and the CUDA kernel
// (norm_linear_kernel.cu). A CTA takes kNormLinearRows rows and kNormLinearCols outputs: it
// normalises its rows into shared memory (each CTA of a row block makes the same ones; the first
// column block writes the sum), then walks the width in chunks of kNormLinearChunk columns of W's
// kNormLinearCols rows, each thread summing 4 outputs.
#pragma once

#include <cstdint>

#include "ops/layer_norm_kernel.h"

namespace combiner::ops {

constexpr int kNormLinearRows = 16;   // rows (images) per CTA
constexpr int kNormLinearCols = 64;   // outputs per CTA
constexpr int kNormLinearChunk = 32;  // W's columns staged at a time

// x, residual and sum: [rows, width]; weight: [out, width] (a torch::nn::Linear's); y:
// [rows, out]; all float32 and contiguous.
struct NormLinear {
  int64_t rows = 0, width = 0, out = 0;
  float eps = 1e-5f;
  const float* x = nullptr;
  const float* residual = nullptr;  // optional: the row normalised is x + residual
  float* sum = nullptr;             // with a residual: x + residual
  const float* norm_weight = nullptr;
  const float* norm_bias = nullptr;
  const float* weight = nullptr;
  const float* bias = nullptr;  // optional
  bool gelu = false;
  float* y = nullptr;
};

// The widths the kernel takes: the LayerNorm kernels' (a multiple of 32 up to 1024).
COMBINER_OPS_HD bool norm_linear_supported(int64_t width) {
  return norm_width_supported(width);
}

// Shared memory of the CUDA kernel: the normalised rows and one chunk of W, each row padded by
// one float against bank conflicts (66 KB at width 1024).
COMBINER_OPS_HD int64_t norm_linear_smem_bytes(int64_t width) {
  return 4 * (int64_t(kNormLinearRows) * (width + 1) +
              int64_t(kNormLinearCols) * (kNormLinearChunk + 1));
}

// ---- the CPU model (norm_linear_cpu.cpp) ----
void norm_linear_cpu(const NormLinear& n);

// ---- the CUDA kernel (norm_linear_kernel.cu; CUDA builds only). `stream` is a cudaStream_t.
void norm_linear_cuda(const NormLinear& n, void* stream);

}  // namespace combiner::ops
