// model::Linear: torch::nn::Linear's function, with the fused op (ops/linear.h) where the path
// asks for it and a gradient is wanted.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <vector>

#include "model/linear.h"
#include "model/precision.h"
#include "ops/bias_grad_kernel.h"
#include "ops/linear.h"
#include "tensor_checks.h"

namespace combiner::model {
namespace {

using combiner::testing::max_abs_diff;

// forward(x) under bf16 autocast (the trainer's), the autocast ended before the backward.
template <typename Forward>
torch::Tensor under_autocast(const torch::Tensor& x, Forward forward) {
  AutocastGuard autocast(true, x.device());
  return forward(x);
}

// model::Linear: the fused op on the fused path while a gradient is wanted, at::linear
// otherwise (the composed path, no grad mode, an out the kernels do not take), the same numbers.
TEST(ModelLinear, TakesTheFusedOpOnlyOnTheFusedPathWithAGradient) {
  torch::manual_seed(6);
  Linear fused(16, 24), composed(16, 24), odd(16, 12);
  {
    torch::NoGradGuard no_grad;
    composed->weight.copy_(fused->weight);
    composed->bias.copy_(fused->bias);
  }
  fused->set_path(LinearImpl::Path::kFused);
  odd->set_path(LinearImpl::Path::kFused);
  composed->set_path(LinearImpl::Path::kComposed);
  const auto x = torch::randn({4, 16});
  auto launched = [&](auto&& f) {
    const int64_t before = ops::bias_grad_launches();
    f();
    return ops::bias_grad_launches() - before;
  };
  EXPECT_EQ(launched([&] { fused->forward_gelu(x).sum().backward(); }), ops::kBiasGradLaunches);
  EXPECT_EQ(launched([&] { composed->forward_gelu(x).sum().backward(); }), 0);
  EXPECT_EQ(launched([&] { odd->forward(x).sum().backward(); }), 0);
  EXPECT_LT(max_abs_diff(fused->bias.grad(), composed->bias.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(fused->weight.grad(), composed->weight.grad()), 1e-5);
  torch::NoGradGuard no_grad;
  EXPECT_EQ(launched([&] { fused->forward(x); }), 0);
  EXPECT_TRUE(torch::equal(fused->forward(x), at::linear(x, fused->weight, fused->bias)));
}

// Under bf16 autocast (the trainer's), the fused path gives autocast's dtypes: a bf16 output and
// float32 parameter gradients.
TEST(ModelLinear, UnderAutocastRunsInBFloat16) {
  Linear layer(16, 8);
  layer->set_path(LinearImpl::Path::kFused);
  const auto x = torch::randn({4, 16}).requires_grad_();
  const auto y = under_autocast(x, [&](const torch::Tensor& in) { return layer(in); });
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.to(torch::kFloat).sum().backward();
  EXPECT_EQ(layer->bias.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(layer->weight.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(x.grad().scalar_type(), torch::kFloat);
}

// Under autocast the fused path reads the bf16 copies it was given (model::ImageTransformer
// writes them once per forward) while its weight and bias are unchanged: the same bits as
// casting them itself. Once either changes in place, or is other memory, it casts them again.
TEST(ModelLinear, ReadsItsBf16CopiesWhileItsParametersAreUnchanged) {
  torch::manual_seed(7);
  Linear layer(16, 8);
  layer->set_path(LinearImpl::Path::kFused);
  const auto x = torch::randn({4, 16});
  auto run = [&] {
    layer->zero_grad();
    const auto y =
        under_autocast(x, [&](const torch::Tensor& in) { return layer->forward_gelu(in); });
    y.to(torch::kFloat).square().sum().backward();
    return std::vector<torch::Tensor>{
        y.detach(), layer->weight.grad().clone(), layer->bias.grad().clone()};
  };
  auto same = [](const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!torch::equal(a[i], b[i])) return false;
    return true;
  };
  const auto cast_itself = run();
  layer->use_copies(layer->weight.detach().to(torch::kBFloat16),
                    layer->bias.detach().to(torch::kBFloat16));
  EXPECT_TRUE(same(run(), cast_itself));
  // Copies of other values are read as given while the parameters stand...
  layer->use_copies((layer->weight.detach() * 2).to(torch::kBFloat16),
                    layer->bias.detach().to(torch::kBFloat16));
  EXPECT_FALSE(same(run(), cast_itself));
  // ...and not once the weight has changed in place (here by nothing: its version moves).
  {
    torch::NoGradGuard no_grad;
    layer->weight.add_(0.0);
  }
  EXPECT_TRUE(same(run(), cast_itself));
  layer->use_copies((layer->weight.detach() * 2).to(torch::kBFloat16),
                    layer->bias.detach().to(torch::kBFloat16));
  {
    torch::NoGradGuard no_grad;
    layer->bias.set_data(layer->bias.detach().clone());  // other memory, same values
  }
  EXPECT_TRUE(same(run(), cast_itself));
}

// On the CPU under bf16 autocast the composed path takes the product a GPU takes: bf16 operands
// summed in float32, the output and the gradients rounded to bf16 as autocast's casts round them.
// The sums here are long and of positive terms (8,192 tokens into each weight gradient), where
// sums kept in bf16 (LibTorch 1.13's CPU bf16 matmul) come out at a fraction of their value.
TEST(ModelLinear, UnderCpuAutocastSumsInFloat32) {
  torch::manual_seed(8);
  Linear layer(64, 32);
  layer->set_path(LinearImpl::Path::kComposed);
  {
    torch::NoGradGuard no_grad;
    layer->weight.abs_();
  }
  const auto x = torch::rand({8192, 64}).requires_grad_();
  const auto y = under_autocast(x, [&](const torch::Tensor& in) { return layer(in); });
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.to(torch::kFloat).sum().backward();
  EXPECT_EQ(layer->weight.grad().scalar_type(), torch::kFloat);

  const auto rounded = [](const torch::Tensor& t) {
    return t.detach().to(torch::kBFloat16).to(torch::kFloat);
  };
  const auto want_y = at::linear(rounded(x), rounded(layer->weight), rounded(layer->bias));
  const auto want_dw = torch::ones({32, 8192}).mm(rounded(x));  // dy = 1: each x column's sum
  const auto relative = [](const torch::Tensor& got, const torch::Tensor& want) {
    return ((got.to(torch::kFloat) - want).abs() / want.abs()).max().item<double>();
  };
  // Each result rounded once to bf16: within 2^-8 of the float32 sums.
  EXPECT_LT(relative(y, want_y), 1.0 / 256);
  EXPECT_LT(relative(layer->weight.grad(), want_dw), 1.0 / 256);
  EXPECT_LT(relative(layer->bias.grad(), torch::full({32}, 8192.0)), 1.0 / 256);
  EXPECT_LT(relative(x.grad(), rounded(layer->weight).sum(0).expand({8192, 64})), 1.0 / 256);
}

}  // namespace
}  // namespace combiner::model
