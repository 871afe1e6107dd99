// The residual add fused into the LayerNorm after it (ops::fused_add_layer_norm): (h, y) equal to
// (x + residual, LayerNorm(x + residual)) by the plain op, and every gradient (x, the residual in
// its own dtype, weight, bias) equal to autograd's through the add and the plain op, whichever of
// h and y the loss reads; one launch forward and two backward, as one LayerNorm.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/layer_norm.h"
#include "tensor_checks.h"

namespace combiner::ops {
namespace {

using combiner::testing::max_abs_diff;

struct AddLayerNormInputs {
  torch::Tensor x, residual, weight, bias;
};

AddLayerNormInputs add_layer_norm_inputs(int64_t rows,
                                         int64_t width,
                                         torch::ScalarType residual_type,
                                         uint64_t seed) {
  torch::manual_seed(seed);
  AddLayerNormInputs in;
  in.x = (torch::randn({2, rows, width}) * 2.0 + 1.0).requires_grad_(true);
  in.residual = torch::randn({2, rows, width}).to(residual_type).requires_grad_(true);
  in.weight = (torch::randn({width}) * 0.5 + 1.0).requires_grad_(true);
  in.bias = (torch::randn({width}) * 0.1).requires_grad_(true);
  return in;
}

// Which outputs the loss reads.
enum class Reads { kBoth, kNormOnly, kSumOnly };

struct AddNormCase {
  torch::ScalarType residual, out;
  Reads reads;
};

class FusedAddNorm : public ::testing::TestWithParam<AddNormCase> {};

TEST_P(FusedAddNorm, IsTheAddThenTheNorm) {
  const auto c = GetParam();
  const int64_t rows = 37, width = 64;
  auto ours = add_layer_norm_inputs(rows, width, c.residual, 5),
       ref = add_layer_norm_inputs(rows, width, c.residual, 5);
  const auto [h, y] =
      fused_add_layer_norm(ours.x, ours.residual, ours.weight, ours.bias, 1e-5, c.out);
  const auto h_ref = ref.x + ref.residual;
  const auto y_ref = fused_layer_norm(h_ref, ref.weight, ref.bias, 1e-5, c.out);
  ASSERT_EQ(h.scalar_type(), torch::kFloat);
  ASSERT_EQ(y.scalar_type(), c.out);
  EXPECT_TRUE(torch::equal(h, h_ref));  // the same float32 add
  EXPECT_TRUE(torch::equal(y, y_ref));  // the same kernels on the same row

  torch::manual_seed(9);
  const auto gh = torch::randn(h.sizes()), gy = torch::randn(y.sizes()).to(c.out);
  auto loss = [&](const torch::Tensor& hh, const torch::Tensor& yy) {
    if (c.reads == Reads::kSumOnly) return (hh * gh).sum();
    if (c.reads == Reads::kNormOnly) return (yy.to(torch::kFloat) * gy.to(torch::kFloat)).sum();
    return (hh * gh).sum() + (yy.to(torch::kFloat) * gy.to(torch::kFloat)).sum();
  };
  loss(h, y).backward();
  loss(h_ref, y_ref).backward();
  EXPECT_EQ(ours.residual.grad().scalar_type(), c.residual);
  EXPECT_LT(max_abs_diff(ours.x.grad(), ref.x.grad()), 1e-5);
  EXPECT_LT(max_abs_diff(ours.residual.grad(), ref.residual.grad()), 1e-5);
  if (c.reads == Reads::kSumOnly) {
    EXPECT_FALSE(ours.weight.grad().defined());  // the norm was not read: no gradient
  } else {
    EXPECT_LT(max_abs_diff(ours.weight.grad(), ref.weight.grad()), 1e-4);
    EXPECT_LT(max_abs_diff(ours.bias.grad(), ref.bias.grad()), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases,
    FusedAddNorm,
    ::testing::Values(AddNormCase{torch::kFloat, torch::kFloat, Reads::kBoth},
                      AddNormCase{torch::kBFloat16, torch::kBFloat16, Reads::kBoth},
                      AddNormCase{torch::kBFloat16, torch::kFloat, Reads::kNormOnly},
                      AddNormCase{torch::kFloat, torch::kBFloat16, Reads::kSumOnly}));

// Against LibTorch's own add and layer_norm, and the launches: one forward, two backward, where
// the add, LayerNorm, the gradients' sum and the residual's cast take six.
TEST(FusedAddNorm, MatchesLibTorchAndCountsAsOneLayerNorm) {
  auto ours = add_layer_norm_inputs(1000, 256, torch::kBFloat16, 3),
       ref = add_layer_norm_inputs(1000, 256, torch::kBFloat16, 3);
  const int64_t before = norm_kernel_launches();
  const auto [h, y] =
      fused_add_layer_norm(ours.x, ours.residual, ours.weight, ours.bias, 1e-5, torch::kFloat);
  EXPECT_EQ(norm_kernel_launches() - before, 1);
  const auto h_ref = ref.x + ref.residual;
  const auto y_ref = torch::layer_norm(h_ref, {256}, ref.weight, ref.bias, 1e-5);
  EXPECT_LT(max_abs_diff(y, y_ref), 2e-5);
  const auto gy = torch::randn(y.sizes()), gh = torch::randn(h.sizes());
  ((h * gh).sum() + (y * gy).sum()).backward();
  ((h_ref * gh).sum() + (y_ref * gy).sum()).backward();
  EXPECT_EQ(norm_kernel_launches() - before, 3);
  EXPECT_LT(max_abs_diff(ours.x.grad(), ref.x.grad()), 1e-4);
  // bf16: the same float32 sum rounded once on both sides, but LibTorch's norm gradient differs
  // from ours in the last float32 bits, which can move a value across a rounding boundary.
  const double ulp = ref.residual.grad().abs().max().item<double>() * std::pow(2.0, -8);
  EXPECT_LE(max_abs_diff(ours.residual.grad(), ref.residual.grad()), ulp);
  EXPECT_LT(max_abs_diff(ours.weight.grad(), ref.weight.grad()), 1e-3);
  EXPECT_LT(max_abs_diff(ours.bias.grad(), ref.bias.grad()), 1e-3);
}

TEST(FusedAddNorm, RefusesAResidualOfAnotherShapeOrDtype) {
  const auto x = torch::randn({4, 64}), w = torch::ones({64}), b = torch::zeros({64});
  EXPECT_EQ(fused_add_norm_unsupported(x, torch::randn({4, 64}), w, b), "");
  EXPECT_NE(fused_add_norm_unsupported(x, torch::randn({4, 32}), w, b), "");
  EXPECT_NE(fused_add_norm_unsupported(x, torch::randn({4, 64}, torch::kDouble), w, b), "");
  EXPECT_NE(fused_add_norm_unsupported(torch::randn({4, 48}), torch::randn({4, 48}), w, b), "");
  try {
    fused_add_layer_norm(x, torch::randn({3, 64}), w, b, 1e-5, torch::kFloat);
    ADD_FAILURE() << "a residual of another shape was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("residual"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace combiner::ops
