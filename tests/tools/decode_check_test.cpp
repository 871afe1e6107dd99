// kernel-check's decode table (src/tools/decode_check.cpp): the decode kernel's CPU model here,
// the CUDA kernel on a GPU, against the static decoder's LibTorch ops and forward() in float64.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <set>

#include "attention/attention.h"
#include "tools/decode_check.h"

namespace combiner::tools {
namespace {

TEST(DecodeCheckTest, CpuModelPassesItsSmallGrid) {
  const auto cases = decode_check_cases(false);
  std::set<std::string> variants;
  for (const auto& c : cases) variants.insert(c.variant);
  EXPECT_EQ(variants.size(), attention::variant_names().size());
  EXPECT_GT(decode_check_cases(true).size(), cases.size());
  for (const auto& c : cases) {
    const auto r = run_decode_check(c, "cpu");
    EXPECT_TRUE(r.pass) << decode_check_line(c, r);
    EXPECT_GT(r.composed, 0.0) << "float32 sums in other orders differ somewhere: "
                               << decode_check_line(c, r);
  }
}

TEST(DecodeCheckTest, AStepTheKernelCannotTakeFailsWithItsReason) {
  DecodeCheckCase c{"combiner-axial-vertical", "max", 48, 12, 512};  // Dv over 256
  const auto r = run_decode_check(c, "cpu");
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.detail.find("value dim 512"), std::string::npos) << r.detail;
  EXPECT_NE(decode_check_line(c, r).find("FAIL"), std::string::npos);
}

TEST(GpuDecodeCheck, CudaPassesItsGrid) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "no CUDA device (combiner-bench kernel-check --device cuda runs this on a GPU)";
  for (const auto& c : decode_check_cases(true)) {
    const auto r = run_decode_check(c, "cuda");
    EXPECT_TRUE(r.pass) << decode_check_line(c, r);
  }
}

}  // namespace
}  // namespace combiner::tools
