// The kernels' softmax exponential (kernel_tile.cuh exp2_ftz) as the emulator runs it: 2^x, with
// results below the smallest normal float flushed to 0, as ex2.approx.ftz gives them on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention/fused/kernel_tile.cuh"

namespace combiner {
namespace {

using attention::fused::cuda_detail::exp2_ftz;

TEST(SoftmaxExponent, IsExp2DownToTheSmallestNormalAndZeroBelow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp2_ftz(0.f), 1.f);
  EXPECT_EQ(exp2_ftz(-1.f), 0.5f);
  EXPECT_EQ(exp2_ftz(3.f), 8.f);
  EXPECT_FLOAT_EQ(exp2_ftz(-0.3f), std::exp2(-0.3f));
  EXPECT_EQ(exp2_ftz(-126.f), std::numeric_limits<float>::min());  // 2^-126: kept
  EXPECT_EQ(exp2_ftz(-126.5f), 0.f);                               // a subnormal: flushed
  EXPECT_EQ(exp2_ftz(-149.f), 0.f);
  EXPECT_EQ(exp2_ftz(-inf), 0.f);  // a masked score
  EXPECT_EQ(exp2_ftz(inf), inf);
  EXPECT_TRUE(std::isnan(exp2_ftz(std::nanf(""))));
}

}  // namespace
}  // namespace combiner
