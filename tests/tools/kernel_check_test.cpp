// kernel-check's grid (src/tools/kernel_check.cpp): the fused kernels' CPU model here, the CUDA
// kernels on a GPU, each case against the LibTorch composition and the float64 dense reference.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "attention/attention.h"
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

// Each layout that takes the abstractions in turn meets every one of them over the GPU's grid
// (2 dtypes x D 32, 64, 128), small or all: the rotation shifts by one per (dtype, D) block, so
// that, say, horizontal's rows of 96 run with the max pools its local passes make themselves.
TEST(KernelCheckTest, EveryRotatedLayoutMeetsEveryAbstraction) {
  for (const auto sizes : {KernelCheckSizes::kSmall, KernelCheckSizes::kAll}) {
    std::map<std::string, std::set<std::string>> met;
    for (const auto& c : kernel_check_cases("cuda", {32, 64, 128}, sizes))
      met[c.variant + " " + std::to_string(c.length) + " " + std::to_string(c.input_length) + " " +
          std::to_string(c.layout)]
          .insert(c.abstraction);
    for (const auto& [layout, abstractions] : met) {
      if (abstractions != std::set<std::string>{"max"}) {  // a layout fixed to the max pools
        EXPECT_EQ(abstractions.size(), abstraction_names().size()) << layout;
      }
    }
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
