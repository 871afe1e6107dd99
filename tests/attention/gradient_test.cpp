// Backward of the fast paths: against the reference through v (dL/dv = A^T dL/do), against
// central differences through q and k in float64, and the bf16 path (fp32 inside).
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/reference.h"
#include "attention_cases.h"

namespace combiner::attention {
namespace {

using testing::Case;

std::vector<Case> gradient_cases() {
  std::vector<Case> out;
  for (const auto& c : testing::all_cases())
    if (c.length == 20) out.push_back(c);  // L = 20, s = 3 (short last block), W = 5
  return out;
}

class GradientTest : public ::testing::TestWithParam<Case> {};

TEST_P(GradientTest, ValueGradientIsReferenceTransposed) {
  const Case& c = GetParam();
  torch::manual_seed(3);
  auto module = make_attention(c.options(), c.length, testing::kDim);
  auto in = testing::random_inputs(c.length, torch::kFloat, 21);
  auto v = in.v.clone().requires_grad_();
  auto g = torch::randn({testing::kBatch, testing::kHeads, c.length, testing::kValueDim});
  (module->forward(in.q, in.k, v) * g).sum().backward();
  auto a = effective_matrix(c.options(), in.q, in.k, deepsets_maps(*module));
  auto expected = torch::matmul(a.transpose(-2, -1), g.to(torch::kDouble));
  EXPECT_LT((v.grad().to(torch::kDouble) - expected).abs().max().item<double>(), 1e-5);
}

TEST_P(GradientTest, QueryKeyGradientsMatchCentralDifferences) {
  const Case& c = GetParam();
  torch::manual_seed(4);
  auto module = make_attention(c.options(), c.length, testing::kDim);
  module->to(torch::kDouble);
  auto in = testing::random_inputs(c.length, torch::kDouble, 22);
  auto g = torch::randn({testing::kBatch, testing::kHeads, c.length, testing::kValueDim},
                        torch::kDouble);
  auto loss = [&](const torch::Tensor& q, const torch::Tensor& k) {
    return (module->forward(q, k, in.v) * g).sum();
  };
  auto q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_();
  loss(q, k).backward();
  // Directional derivative along random directions; max pooling is smooth almost everywhere.
  for (int trial = 0; trial < 2; ++trial) {
    auto dq = torch::randn_like(in.q), dk = torch::randn_like(in.k);
    const double eps = 1e-6;
    torch::NoGradGuard no_grad;
    const double numeric = (loss(in.q + eps * dq, in.k + eps * dk).item<double>() -
                            loss(in.q - eps * dq, in.k - eps * dk).item<double>()) /
                           (2 * eps);
    const double analytic = ((q.grad() * dq).sum() + (k.grad() * dk).sum()).item<double>();
    EXPECT_NEAR(numeric, analytic, 1e-5 * (1 + std::abs(analytic)));
  }
}

TEST_P(GradientTest, Bfloat16RunsInFloat) {
  const Case& c = GetParam();
  torch::manual_seed(5);
  auto module = make_attention(c.options(), c.length, testing::kDim);
  auto in = testing::random_inputs(c.length, torch::kFloat, 23);
  auto q = in.q.to(torch::kBFloat16), k = in.k.to(torch::kBFloat16), v = in.v.to(torch::kBFloat16);
  auto out = module->forward(q, k, v);
  ASSERT_EQ(out.scalar_type(), torch::kBFloat16);
  auto expected = module->forward(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat));
  EXPECT_LT((out.to(torch::kFloat) - expected).abs().max().item<double>(), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(AllVariants,
                         GradientTest,
                         ::testing::ValuesIn(gradient_cases()),
                         [](const auto& info) { return testing::case_name(info.param); });

}  // namespace
}  // namespace combiner::attention
