// kernel-check's norm-linear table (src/tools/norm_linear_check.cpp): the kernel's CPU model
// here, the CUDA kernel on a GPU, against the LibTorch ops it replaces in float64.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tools/norm_linear_check.h"

namespace combiner::tools {
namespace {

TEST(NormLinearCheckTest, CpuModelPassesItsSmallGrid) {
  const auto cases = norm_linear_check_cases(false);
  EXPECT_GT(norm_linear_check_cases(true).size(), cases.size());
  for (const auto& c : cases) {
    const auto r = run_norm_linear_check(c, "cpu");
    EXPECT_TRUE(r.pass) << norm_linear_check_line(c, r);
    EXPECT_GT(r.y, 0.0) << "float32 against float64 differs somewhere: "
                        << norm_linear_check_line(c, r);
  }
}

TEST(NormLinearCheckTest, AWidthTheKernelDoesNotTakeFailsWithItsReason) {
  const NormLinearCheckCase c{4, 48, 8, true, false};
  const auto r = run_norm_linear_check(c, "cpu");
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("width 48"), std::string::npos) << r.detail;
  EXPECT_NE(norm_linear_check_line(c, r).find("FAIL"), std::string::npos);
}

TEST(GpuNormLinearCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : norm_linear_check_cases(true)) {
    const auto r = run_norm_linear_check(c, "cuda");
    EXPECT_TRUE(r.pass) << norm_linear_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::tools
