// kernel-check's norm-linear table: sampling's LayerNorm-and-linear kernel (ops/norm_linear.h;
// the CUDA kernel on a GPU, its CPU model on the CPU) against the LibTorch ops it replaces, in
// float64 on the same float32 inputs: the sum x + residual and y = act(LayerNorm(sum) W^T + b).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::tools {

struct NormLinearCheckCase {
  int64_t rows = 0, width = 0, out = 0;
  bool residual = false, gelu = false;
};

// Errors are max |fused - expected| / max(1, max |expected|) over the tensor.
struct NormLinearCheckResult {
  double sum = 0, y = 0, tol = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// Widths 32 .. 1024 (96: a partly used chunk count), rows of one image, of a partial row block
// and of the 128-layer preset's 64 images, outputs of one, of a partial column block and of a
// qkv projection; with and without the residual and the GELU.
std::vector<NormLinearCheckCase> norm_linear_check_cases(bool large);

NormLinearCheckResult run_norm_linear_check(const NormLinearCheckCase& c,
                                            const std::string& device);

std::string norm_linear_check_header();
std::string norm_linear_check_line(const NormLinearCheckCase& c, const NormLinearCheckResult& r);

}  // namespace combiner::tools
