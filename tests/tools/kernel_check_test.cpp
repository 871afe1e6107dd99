// kernel-check's grid (src/tools/kernel_check.cpp): the fused kernels' CPU model here, the CUDA
// kernels on a GPU, each case against the LibTorch composition and the float64 dense reference.
#include <gtest/gtest.h>

#include "tools/kernel_check.h"

namespace combiner::attention {
namespace {

TEST(KernelCheckTest, CpuModelPassesItsGrid) {
  const auto cases = kernel_check_cases("cpu", {32});
  ASSERT_EQ(cases.size(), 57u);  // 3 dtypes (float32, float64, bfloat16) x (11 small + 8 large)
  EXPECT_EQ(kernel_check_cases("cpu", {32}, KernelCheckSizes::kSmall).size(), 33u);
  for (const auto& c : cases) {
    const auto r = run_kernel_check(c, "cpu");
    EXPECT_TRUE(r.pass) << kernel_check_line(c, r);
  }
}

// On a GPU: the CUDA kernels (or, in a build without them, the LibTorch path on CUDA) against
// the same references, bf16 and fp32, the large-n cases included.
TEST(GpuKernelCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : kernel_check_cases("cuda", {64})) {
    const auto r = run_kernel_check(c, "cuda");
    EXPECT_TRUE(r.pass) << kernel_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::attention
