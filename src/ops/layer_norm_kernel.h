// LayerNorm over the last dimension in one pass each way, without torch: the forward normalises
// an fp32 row and writes it in the dtype its reader wants (bf16 for a matmul under autocast, so
// no cast kernel follows it), with the row's mean and 1/std; the backward reads dy in that dtype
// and makes dx and, in the same pass, each part's partial sums of dweight and dbias, which a
// second launch adds up in a fixed order. Two implementations read these descriptors: a CPU model
// (layer_norm_cpu.cpp: plain loops, the same formulas and the same parts; tests) and the CUDA
// kernels (layer_norm_kernel.cu, CUDA builds). A warp owns a row: 32 lanes over its columns.
//
//   forward:  mean = sum(x) / W, var = sum((x - mean)^2) / W (two passes over the row held in
//             registers), rstd = 1 / sqrt(var + eps), y = (x - mean) * rstd * weight + bias
//   backward: xhat = (x - mean) * rstd, g = dy * weight,
//             dx = rstd * (g - sum(g) / W - xhat * sum(g * xhat) / W),
//             dweight = sum over rows of dy * xhat, dbias = sum over rows of dy
//
// With a residual (a transformer block's x + branch followed by the next LayerNorm): the
// forward normalises s = x + residual (added in fp32) and writes s too; the backward adds the
// gradient s has from its other readers (d_sum) to dx, and writes dx again in the residual's
// dtype where that differs: the add, the two gradients' sum and its cast in the same passes.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define COMBINER_OPS_HD __host__ __device__ __forceinline__
#else
#define COMBINER_OPS_HD inline
#endif

namespace combiner::ops {

enum class Dtype : int { kFloat32, kBFloat16 };

constexpr int kNormWarps = 4;            // warps (rows in flight) per CTA
constexpr int64_t kNormMaxWidth = 1024;  // 32 lanes x 32 columns held in registers
constexpr int64_t kNormMaxParts = 1024;  // backward: CTAs, each one row of partial sums

// The widths the kernels take: a multiple of 32 up to kNormMaxWidth.
COMBINER_OPS_HD bool norm_width_supported(int64_t width) {
  return width > 0 && width % 32 == 0 && width <= kNormMaxWidth;
}
// Column sums over rows in parts (the LayerNorm's dweight and dbias, a linear's bias gradient):
// CTAs of `warps` warps, about 8 rows per warp, at most `max_parts`. Fixed by the shape alone,
// so that the sums' order, and so their rounding, is the same on every GPU. Warp w of part p
// takes rows w + warps * p, then every warps * parts rows after it.
COMBINER_OPS_HD int64_t row_parts(int64_t rows, int64_t warps, int64_t max_parts) {
  const int64_t per_part = warps * 8;
  const int64_t parts = (rows + per_part - 1) / per_part;
  return parts < 1 ? 1 : parts > max_parts ? max_parts : parts;
}
COMBINER_OPS_HD int64_t part_of_row(int64_t r, int64_t warps, int64_t parts) {
  return r % (warps * parts) / warps;
}
// The LayerNorm backward's parts (CTAs of its first launch), and the part taking row r.
COMBINER_OPS_HD int64_t norm_parts(int64_t rows) {
  return row_parts(rows, kNormWarps, kNormMaxParts);
}
COMBINER_OPS_HD int64_t norm_part_of_row(int64_t r, int64_t parts) {
  return part_of_row(r, kNormWarps, parts);
}

struct NormForward {
  int64_t rows = 0, width = 0;
  float eps = 1e-5f;
  const float* x = nullptr;       // [rows, width] fp32, rows contiguous
  const float* weight = nullptr;  // [width] fp32
  const float* bias = nullptr;    // [width] fp32
  void* y = nullptr;              // [rows, width] in y_dtype
  Dtype y_dtype = Dtype::kFloat32;
  float* mean = nullptr;  // [rows]
  float* rstd = nullptr;  // [rows]
  // Optional: the row normalised is x + residual, written to `sum`.
  const void* residual = nullptr;  // [rows, width] in residual_dtype
  Dtype residual_dtype = Dtype::kFloat32;
  float* sum = nullptr;  // [rows, width] fp32
};

struct NormBackward {
  int64_t rows = 0, width = 0, parts = 1;
  const float* x = nullptr;
  const float* weight = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  const void* dy = nullptr;  // [rows, width] in dy_dtype
  Dtype dy_dtype = Dtype::kFloat32;
  float* dx = nullptr;       // [rows, width] fp32
  float* partial = nullptr;  // [parts, 2, width]: each part's dweight, dbias
  float* dweight = nullptr;  // [width]: partial summed over the parts, part 0 first
  float* dbias = nullptr;    // [width]
  // Optional (a forward with a residual; x is then its sum): dx += d_sum, and dx written again
  // to d_residual in residual_dtype.
  const float* d_sum = nullptr;  // [rows, width] fp32
  void* d_residual = nullptr;    // [rows, width] in residual_dtype
  Dtype residual_dtype = Dtype::kFloat32;
};

// Kernels each launches on a GPU.
constexpr int kNormForwardLaunches = 1;
constexpr int kNormBackwardLaunches = 2;

void norm_forward_cpu(const NormForward& f);
void norm_backward_cpu(const NormBackward& b);
// CUDA builds only; `stream` is a cudaStream_t.
void norm_forward_cuda(const NormForward& f, void* stream);
void norm_backward_cuda(const NormBackward& b, void* stream);

}  // namespace combiner::ops
