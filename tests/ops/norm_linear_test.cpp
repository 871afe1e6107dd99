// The LayerNorm-and-linear op (ops/norm_linear.h) on its CPU model: what it returns beside y, what
// it refuses and what it counts (its numbers against LibTorch's ops: kernel-check's norm-linear
// table, tests/tools/norm_linear_check_test.cpp).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ops/norm_linear.h"

namespace combiner::ops {
namespace {

struct NormLinearInputs {
  torch::Tensor x, residual, gamma, beta, weight, bias;
};
NormLinearInputs norm_linear_inputs(int64_t rows, int64_t width, int64_t out) {
  torch::manual_seed(5);
  return {torch::randn({rows, width}),
          torch::randn({rows, width}),
          torch::rand({width}) + 0.5,
          torch::randn({width}) * 0.1,
          torch::randn({out, width}) * 0.1,
          torch::randn({out})};
}

TEST(NormLinear, ReturnsTheSumAndTheProjectionOfItsNorm) {
  auto in = norm_linear_inputs(3, 64, 10);
  torch::NoGradGuard no_grad;
  const auto [sum, y] =
      norm_linear(in.x, in.residual, in.gamma, in.beta, 1e-5, in.weight, in.bias, true);
  EXPECT_TRUE(torch::equal(sum, in.x + in.residual));
  const auto expected = torch::gelu(torch::linear(
      torch::layer_norm(in.x + in.residual, {64}, in.gamma, in.beta, 1e-5), in.weight, in.bias));
  EXPECT_LT((y - expected).abs().max().item<double>(), 1e-5);
  // Without a residual the sum is x itself; without a bias, none is added.
  const auto [same, plain] =
      norm_linear(in.x, {}, in.gamma, in.beta, 1e-5, in.weight, torch::Tensor(), false);
  EXPECT_TRUE(same.is_same(in.x));
  EXPECT_LT(
      (plain - torch::linear(torch::layer_norm(in.x, {64}, in.gamma, in.beta, 1e-5), in.weight))
          .abs()
          .max()
          .item<double>(),
      1e-5);
}

TEST(NormLinear, RefusesWhatTheKernelCannotTakeInOneLine) {
  auto in = norm_linear_inputs(2, 48, 4);
  torch::NoGradGuard no_grad;
  auto why = [&](const NormLinearInputs& i) {
    try {
      norm_linear(i.x, i.residual, i.gamma, i.beta, 1e-5, i.weight, i.bias, false);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(why(in), "norm-linear: width 48 is not a multiple of 32 up to 1024");
  in = norm_linear_inputs(2, 64, 4);
  auto bad = in;
  bad.x = in.x.to(torch::kBFloat16);
  EXPECT_EQ(why(bad), "norm-linear: x must be float32 [rows, width], got BFloat16 [2, 64]");
  bad = in;
  bad.weight = torch::randn({4, 32});
  EXPECT_EQ(why(bad),
            "norm-linear: the linear's weight must be float32 [out, 64] on x's device, got "
            "[4, 32]");
  bad = in;
  bad.residual = torch::randn({3, 64});
  EXPECT_EQ(why(bad),
            "norm-linear: the residual must be float32 [2, 64] on x's device, got [3, 64]");
  {
    torch::AutoGradMode grad(true);
    bad = in;
    bad.weight = in.weight.clone().requires_grad_();
    EXPECT_EQ(why(bad), "norm-linear: no gradient: an input requires one");
  }
}

TEST(NormLinear, CountsOneLaunchACall) {
  auto in = norm_linear_inputs(2, 32, 3);
  torch::NoGradGuard no_grad;
  const int64_t before = norm_linear_launches();
  norm_linear(in.x, in.residual, in.gamma, in.beta, 1e-5, in.weight, in.bias, false);
  EXPECT_EQ(norm_linear_launches() - before, 1);
}

}  // namespace
}  // namespace combiner::ops
