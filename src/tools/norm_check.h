// kernel-check's LayerNorm table: the fused LayerNorm (ops/layer_norm.h; the CUDA kernels on a
// GPU, their CPU model on the CPU) against LibTorch's layer_norm in float64 on the same inputs,
// its output and the gradients of x, weight and bias.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::tools {

struct NormCheckCase {
  int64_t rows = 0, width = 0;
  std::string out_dtype;  // float32 | bfloat16: y's dtype (and dy's)
  bool add = false;       // fused_add_layer_norm: a residual (in y's dtype) added first
};

// Errors are max |fused - expected| / max(1, max |expected|) over the tensor. With `add`, y
// includes the sum's error; d_residual is the residual's gradient's (in its dtype: y's
// tolerance).
struct NormCheckResult {
  double y = 0, dx = 0, d_residual = 0, dweight = 0, dbias = 0;
  double tol_y = 0, tol_grad = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// Every register count of the CUDA kernels (widths 32 .. 1024, and 96: a partly used one), rows
// of one part, several, and (kAll, `large`) more than the backward's kNormMaxParts CTAs hold
// once; both output dtypes; then the residual add at every width.
std::vector<NormCheckCase> norm_check_cases(bool large);

NormCheckResult run_norm_check(const NormCheckCase& c, const std::string& device);

std::string norm_check_header();
std::string norm_check_line(const NormCheckCase& c, const NormCheckResult& r);

}  // namespace combiner::tools
