// kernel-check's linear table: the linear layer whose backward makes the bias's gradient with the
// bias-gradient kernels (ops/linear.h; the CUDA kernels on a GPU, their CPU model on the CPU), and
// GELU's backward with them, against LibTorch's linear and gelu in float64 on the same inputs (as
// rounded to the compute dtype): the output and the gradients of x, weight and bias, each product
// summed in float32 on either device (ops/gemm.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::tools {

struct LinearCheckCase {
  int64_t rows = 0, in = 0, out = 0;
  std::string dtype;  // float32 | bfloat16: the compute dtype (autocast's)
  bool gelu = false;
};

// Errors are max |fused - expected| / max(1, max |expected|) over the tensor.
struct LinearCheckResult {
  double y = 0, dx = 0, dweight = 0, dbias = 0;
  double tol = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// Outputs of one lane's 8 columns, of a partly used 256-column tile and of the 128-layer preset's
// qkv and MLP projections; rows of one part, of several, and (`large`) of the preset's batch of
// 16 x 3072 positions and of more than the kernels' 1,024 parts hold once; both dtypes, with and
// without GELU.
std::vector<LinearCheckCase> linear_check_cases(bool large);

LinearCheckResult run_linear_check(const LinearCheckCase& c, const std::string& device);

std::string linear_check_header();
std::string linear_check_line(const LinearCheckCase& c, const LinearCheckResult& r);

}  // namespace combiner::tools
