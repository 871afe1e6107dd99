// Bits/dim and the learning-rate schedule against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "train/bits.h"
#include "train/schedule.h"

namespace combiner::train {
namespace {

TEST(Bits, ConstantLogitsGiveExactlyEightBits) {
  auto logits = torch::zeros({3, 10, 256});
  auto x = torch::randint(0, 256, {3, 10}, torch::kLong);
  auto bits = subpixel_bits(logits, x);
  EXPECT_NEAR(bits.mean().item<double>(), 8.0, 1e-6);
  EXPECT_NEAR(mean_bits(logits, x).item<double>(), 8.0, 1e-6);
}

TEST(Bits, HistogramModelGivesItsEntropy) {
  // A model whose every prediction is the data's own histogram scores its entropy in bits.
  std::vector<int64_t> values = {0, 0, 0, 0, 1, 1, 2, 3};  // p = 1/2, 1/4, 1/8, 1/8
  auto x = torch::tensor(values, torch::kLong).view({1, 8});
  auto probs = torch::zeros({256});
  probs[0] = 0.5;
  probs[1] = 0.25;
  probs[2] = 0.125;
  probs[3] = 0.125;
  auto logits = probs.clamp_min(1e-30).log().expand({1, 8, 256});
  const double entropy = 0.5 * 1 + 0.25 * 2 + 0.125 * 3 + 0.125 * 3;  // 1.75 bits
  EXPECT_NEAR(mean_bits(logits, x).item<double>(), entropy, 1e-6);
  auto bits = subpixel_bits(logits, x)[0];
  EXPECT_NEAR(bits[0].item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(bits[7].item<double>(), 3.0, 1e-6);
}

TEST(Schedule, WarmupPeakAndCosineFloor) {
  config::TrainConfig t;
  t.steps = 100;
  t.warmup_steps = 10;
  t.lr = 1e-3;
  t.min_lr = 1e-5;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(t, 9), 1e-3);     // end of warmup: the peak
  EXPECT_DOUBLE_EQ(learning_rate(t, 10), 1e-3);    // cosine starts at the peak
  EXPECT_NEAR(learning_rate(t, 99), 1e-5, 1e-15);  // the last update uses the floor
  const double middle = learning_rate(t, 10 + 89 / 2);
  EXPECT_GT(middle, 1e-5);
  EXPECT_LT(middle, 1e-3);
  for (int64_t s = 10; s < 99; ++s) EXPECT_GE(learning_rate(t, s), learning_rate(t, s + 1));
}

TEST(Schedule, NoWarmupStartsAtPeak) {
  config::TrainConfig t;
  t.steps = 5;
  t.warmup_steps = 0;
  t.lr = 2e-3;
  t.min_lr = 0.0;
  EXPECT_DOUBLE_EQ(learning_rate(t, 0), 2e-3);
  EXPECT_NEAR(learning_rate(t, 4), 0.0, 1e-18);
}

}  // namespace
}  // namespace combiner::train
