// kernel-check's loss table (src/tools/loss_check.cpp): the loss kernels' CPU model here, the CUDA
// kernels on a GPU, in the loss op against LibTorch's log_softmax in float64.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "tools/loss_check.h"

namespace combiner::tools {
namespace {

TEST(LossCheckTest, CpuModelPassesItsGrid) {
  const auto small = loss_check_cases(false), all = loss_check_cases(true);
  EXPECT_GT(all.size(), small.size());
  for (const auto& c : all) {
    const auto r = run_loss_check(c, "cpu");
    EXPECT_TRUE(r.pass) << loss_check_line(c, r);
    if (c.dtype == "float32" && c.vocab > 1) {
      EXPECT_GT(r.dlogits, 0.0) << "float32 against float64 differs somewhere: "
                                << loss_check_line(c, r);
    }
  }
}

TEST(LossCheckTest, ACaseTheOpRefusesFailsWithItsReason) {
  const LossCheckCase c{4, 0, "float32", true};
  const auto r = run_loss_check(c, "cpu");
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("V >= 1"), std::string::npos) << r.detail;
  EXPECT_NE(loss_check_line(c, r).find("FAIL"), std::string::npos);
}

TEST(GpuLossCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : loss_check_cases(true)) {
    const auto r = run_loss_check(c, "cuda");
    EXPECT_TRUE(r.pass) << loss_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::tools
