// The weights' moving average: the update rule, and that checkpoints carry it.
#include <gtest/gtest.h>

#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/ema.h"

namespace combiner::train {
namespace {

struct TwoTensors : torch::nn::Module {
  TwoTensors() {
    weight = register_parameter("weight", torch::tensor({1.0f, 2.0f}));
    count = register_buffer("count", torch::tensor({3}, torch::kLong));
  }
  torch::Tensor weight, count;
};

TEST(Ema, StartsAsACopyAndFollowsTheRule) {
  TwoTensors m;
  auto ema = start_ema(m);
  ASSERT_EQ(ema.size(), 2u);
  torch::NoGradGuard no_grad;
  m.weight.copy_(torch::tensor({3.0f, -2.0f}));
  m.count.fill_(4);
  update_ema(ema, m, 0.75);
  // 0.75 * old + 0.25 * new; the copy at start did not alias the parameter.
  EXPECT_TRUE(torch::allclose(ema[0].second, torch::tensor({1.5f, 1.0f})));
  EXPECT_EQ(ema[1].second.item<int64_t>(), 4);  // buffers of integers are copied
  update_ema(ema, m, 0.0);
  EXPECT_TRUE(torch::equal(ema[0].second, m.weight));
}

TEST(Ema, FollowsTheRuleBitwiseOnRandomWeights) {
  struct Big : torch::nn::Module {
    Big() { weight = register_parameter("weight", torch::randn({1000})); }
    torch::Tensor weight;
  } m;
  torch::NoGradGuard no_grad;
  auto ema = start_ema(m);
  ema[0].second.copy_(torch::randn({1000}));
  // The per-tensor update the foreach calls replace: mul_ then add_ with alpha.
  auto expected = ema[0].second.clone().mul_(0.999).add_(m.weight, 1.0 - 0.999);
  update_ema(ema, m, 0.999);
  EXPECT_TRUE(torch::equal(ema[0].second, expected));
}

TEST(Ema, CheckpointRoundTrip) {
  testing::TempDir dir;
  TwoTensors m;
  Checkpoint c;
  c.model = capture_model(m);
  c.ema = start_ema(m);
  c.ema[0].second.fill_(7.0f);
  const auto path = dir.file("x.ckpt");
  save_checkpoint(path, c);
  auto back = load_checkpoint(path);
  ASSERT_EQ(back.ema.size(), 2u);
  EXPECT_TRUE(torch::equal(back.ema[0].second, c.ema[0].second));
  c.ema.clear();
  save_checkpoint(path, c);
  EXPECT_TRUE(load_checkpoint(path).ema.empty());
}

}  // namespace
}  // namespace combiner::train
