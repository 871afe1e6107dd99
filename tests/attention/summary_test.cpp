// SpanSummary's cumulative max against torch::cummax (values and gradients, ties, both
// directions), the bfloat16 pooling the fused path relies on being exact, and what the
// cumulative max keeps for its backward (its input, not an index per element).
#include <gtest/gtest.h>

#include "attention/summary.h"
#include "util/device.h"

namespace combiner::attention {
namespace {

struct Owner : torch::nn::Module {};

// sum(w * f(x)) and its gradient in x.
std::pair<torch::Tensor, torch::Tensor> value_and_grad(
    const std::function<torch::Tensor(const torch::Tensor&)>& f,
    const torch::Tensor& x,
    const torch::Tensor& w) {
  auto in = x.detach().clone().requires_grad_();
  auto y = f(in);
  (y * w.to(y.scalar_type())).sum().backward();
  return {y.detach(), in.grad()};
}

TEST(CumulativeMax, MatchesTorchCummaxWithTies) {
  Owner owner;
  SpanSummary summary(owner, "max", 4, true);
  torch::manual_seed(0);
  // Small integers: many ties along the axis, so the arg-max rule matters.
  auto x = torch::randint(0, 4, {2, 3, 7, 5, 4}).to(torch::kDouble);
  auto w = torch::randn({2, 3, 7, 5, 4}, torch::kDouble);
  for (int64_t dim : {2, 3}) {
    for (bool reverse : {false, true}) {
      for (bool keep : {false, true}) {
        auto ours = value_and_grad(
            [&](const torch::Tensor& t) { return cumulative_max(t, dim, reverse, keep); }, x, w);
        auto torch_cummax = [&](const torch::Tensor& t) {
          auto in = reverse ? t.flip(dim) : t;
          auto out = std::get<0>(torch::cummax(in, dim));
          return reverse ? out.flip(dim) : out;
        };
        auto expected = value_and_grad(torch_cummax, x, w);
        EXPECT_TRUE(torch::equal(ours.first, expected.first)) << "dim " << dim << " " << reverse;
        EXPECT_TRUE(torch::allclose(ours.second, expected.second, 0, 1e-12))
            << "dim " << dim << " reverse " << reverse << " keep " << keep;
      }
    }
  }
  EXPECT_TRUE(torch::equal(summary.cumulative(x, 2, false), cumulative_max(x, 2, false, true)));
}

// The fused path pools bfloat16 operands directly for plain max pools: values, and the
// gradients that reach x, are those of pooling a float32 copy and rounding.
TEST(SpanSummary, MaxPoolsOfBfloat16AreTheFloat32Ones) {
  Owner owner;
  SpanSummary summary(owner, "max", 8, true);
  ASSERT_TRUE(summary.exact_in_input_dtype(true) && summary.exact_in_input_dtype(false));
  torch::manual_seed(1);
  auto x = torch::randn({2, 2, 6, 9, 8}).to(torch::kBFloat16);
  auto w = torch::randn({2, 2, 6, 9, 8}).to(torch::kBFloat16);
  using Fn = std::function<torch::Tensor(const torch::Tensor&)>;
  for (const Fn& pool : std::vector<Fn>{
           [&](const torch::Tensor& t) { return cumulative_max(t, 2, false, false); },
           [&](const torch::Tensor& t) { return cumulative_max(t, 3, true, false); },
           [&](const torch::Tensor& t) { return cumulative_max(t, 2, true, true); },
           [&](const torch::Tensor& t) { return summary.pool(t, 3).unsqueeze(3).expand_as(t); }}) {
    auto direct = value_and_grad(pool, x, w);
    auto via_float = value_and_grad(
        [&](const torch::Tensor& t) { return pool(t.to(torch::kFloat)).to(torch::kBFloat16); },
        x,
        w);
    EXPECT_TRUE(torch::equal(direct.first, via_float.first));
    EXPECT_TRUE(torch::equal(direct.second, via_float.second));
  }
  Owner other;
  EXPECT_FALSE(SpanSummary(other, "mean", 8, true).exact_in_input_dtype(false));
  EXPECT_FALSE(SpanSummary(other, "deepsets-max", 8, true).exact_in_input_dtype(true));
}

TEST(CumulativeMax, WithoutIndicesKeepsOnlyItsInput) {
  util::count_cpu_tensor_bytes();
  const torch::Device cpu(torch::kCPU);
  for (bool keep : {false, true}) {
    auto x = torch::randn({4, 64, 16, 64}).requires_grad_();  // 1 MiB of float32
    const double before = util::device_allocated_mib(cpu);
    auto y = cumulative_max(x, 2, false, keep);
    // y (1 MiB), and 2 MiB of int64 indices only where they are kept.
    EXPECT_NEAR(util::device_allocated_mib(cpu) - before, keep ? 3.0 : 1.0, 0.01);
    y.sum().backward();
    EXPECT_EQ(x.grad().sizes(), x.sizes());
  }
}

}  // namespace
}  // namespace combiner::attention
