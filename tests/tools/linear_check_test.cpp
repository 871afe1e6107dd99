// kernel-check's linear table (src/tools/linear_check.cpp): the bias-gradient kernels' CPU model
// here, the CUDA kernels on a GPU, in the linear op against LibTorch's ops in float64.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tools/linear_check.h"

namespace combiner::tools {
namespace {

TEST(LinearCheckTest, CpuModelPassesItsSmallGrid) {
  const auto cases = linear_check_cases(false);
  EXPECT_GT(linear_check_cases(true).size(), cases.size());
  for (const auto& c : cases) {
    const auto r = run_linear_check(c, "cpu");
    EXPECT_TRUE(r.pass) << linear_check_line(c, r);
    EXPECT_GT(r.y, 0.0) << "float32 against float64 differs somewhere: " << linear_check_line(c, r);
  }
}

TEST(LinearCheckTest, AnOutputTheKernelsDoNotTakeFailsWithItsReason) {
  const LinearCheckCase c{4, 16, 12, "float32", false};
  const auto r = run_linear_check(c, "cpu");
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("out 12"), std::string::npos) << r.detail;
  EXPECT_NE(linear_check_line(c, r).find("FAIL"), std::string::npos);
}

TEST(GpuLinearCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : linear_check_cases(true)) {
    const auto r = run_linear_check(c, "cuda");
    EXPECT_TRUE(r.pass) << linear_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::tools
