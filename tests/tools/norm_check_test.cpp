// kernel-check's LayerNorm table (src/tools/norm_check.cpp): the kernels' CPU model here, the
// CUDA kernels on a GPU, against LibTorch's layer_norm in float64 (after the residual add, for
// the fused add and norm).
#include <gtest/gtest.h>

#include <algorithm>

#include "tools/norm_check.h"

namespace combiner::tools {
namespace {

TEST(NormCheckTest, CpuModelPassesItsSmallGrid) {
  const auto cases = norm_check_cases(false);
  // 2 dtypes x 6 widths x 3 row counts, then the residual add: 2 dtypes x 6 widths.
  ASSERT_EQ(cases.size(), 48u);
  EXPECT_EQ(std::count_if(cases.begin(), cases.end(), [](const NormCheckCase& c) { return c.add; }),
            12);
  EXPECT_GT(norm_check_cases(true).size(), cases.size());
  for (const auto& c : cases) {
    const auto r = run_norm_check(c, "cpu");
    EXPECT_TRUE(r.pass) << norm_check_line(c, r);
    EXPECT_LT(r.y, r.tol_y) << norm_check_line(c, r);
  }
}

TEST(NormCheckTest, AWidthTheKernelsDoNotTakeFailsWithItsReason) {
  const auto r = run_norm_check({4, 48, "float32"}, "cpu");
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("width 48"), std::string::npos) << r.detail;
  EXPECT_NE(norm_check_line({4, 48, "float32"}, r).find("FAIL"), std::string::npos);
}

TEST(GpuNormCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : norm_check_cases(true)) {
    const auto r = run_norm_check(c, "cuda");
    EXPECT_TRUE(r.pass) << norm_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::tools
