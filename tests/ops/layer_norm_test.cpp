// The LayerNorm kernels' CPU model and their autograd op (ops/layer_norm.h) against LibTorch's
// layer_norm: values, the bf16 output's rounding, gradients of x, weight and bias (the dweight
// and dbias partial sums over many parts included), the shared part rule, and clear refusals.
#include <gtest/gtest.h>

#include "ops/layer_norm.h"
#include "ops/layer_norm_kernel.h"
#include "tensor_checks.h"

namespace combiner::ops {
namespace {

using combiner::testing::max_abs_diff;

struct LayerNormInputs {
  torch::Tensor x, weight, bias;
};

// Rows far from zero mean and unit variance, so that a one-pass variance would lose digits.
LayerNormInputs layer_norm_inputs(int64_t rows, int64_t width, uint64_t seed) {
  torch::manual_seed(seed);
  LayerNormInputs in;
  in.x = (torch::randn({rows, width}) * 2.5 + 3.0).requires_grad_(true);
  in.weight = (torch::randn({width}) * 0.5 + 1.0).requires_grad_(true);
  in.bias = (torch::randn({width}) * 0.1).requires_grad_(true);
  return in;
}

struct Shape {
  int64_t rows, width;
};

class FusedNorm : public ::testing::TestWithParam<Shape> {};

TEST_P(FusedNorm, MatchesLayerNormValuesAndGradients) {
  const auto [rows, width] = GetParam();
  for (const auto out : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(out));
    auto ours = layer_norm_inputs(rows, width, 7);
    auto ref = layer_norm_inputs(rows, width, 7);
    const auto y = fused_layer_norm(ours.x, ours.weight, ours.bias, 1e-5, out);
    const auto y_ref = torch::layer_norm(ref.x, {width}, ref.weight, ref.bias, 1e-5);
    ASSERT_EQ(y.scalar_type(), out);
    ASSERT_EQ(y.sizes(), y_ref.sizes());
    if (out == torch::kFloat) {
      EXPECT_LT(max_abs_diff(y, y_ref), 2e-5);
    } else {
      // One rounding of the float32 result: within half a bf16 ulp of LibTorch's float32 value
      // (plus its own float32 rounding), and exactly the float32 fused output rounded.
      const auto y32 = fused_layer_norm(ours.x, ours.weight, ours.bias, 1e-5, torch::kFloat);
      EXPECT_TRUE(torch::equal(y, y32.to(torch::kBFloat16)));
      const auto ulp = y_ref.detach().abs() * std::pow(2.0, -8) + 1e-5;
      EXPECT_TRUE(((y.to(torch::kFloat) - y_ref).abs() <= ulp).all().item<bool>());
    }
    // dy in y's dtype, as autograd hands it; the reference sees the same values in float32.
    const auto dy = torch::randn({rows, width}).to(out);
    y.backward(dy);
    y_ref.backward(dy.to(torch::kFloat));
    EXPECT_LT(max_abs_diff(ours.x.grad(), ref.x.grad()), 1e-4);
    EXPECT_LT(max_abs_diff(ours.weight.grad(), ref.weight.grad()),
              1e-5 * std::max<double>(1.0, double(rows)));
    EXPECT_LT(max_abs_diff(ours.bias.grad(), ref.bias.grad()),
              1e-5 * std::max<double>(1.0, double(rows)));
  }
}

// Widths of every register count the CUDA kernels instantiate (32 lanes x 1 .. 32 columns, and
// 96: three columns a lane in an instance of four); rows of one part, several, and more than
// kNormMaxParts CTAs' worth (warps walking rows parts x 4 apart).
INSTANTIATE_TEST_SUITE_P(Shapes,
                         FusedNorm,
                         ::testing::Values(Shape{1, 32},
                                           Shape{7, 64},
                                           Shape{33, 96},
                                           Shape{300, 256},
                                           Shape{65, 512},
                                           Shape{5, 1024},
                                           Shape{40000, 32}));

TEST(FusedNorm, KeepsLeadingDimensionsAndNonContiguousInput) {
  auto in = layer_norm_inputs(24, 64, 3);
  const auto x = in.x.detach().view({2, 3, 4, 64}).transpose(1, 2);  // [2, 4, 3, 64], strided
  const auto y = fused_layer_norm(x, in.weight, in.bias, 1e-5, torch::kFloat);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_LT(max_abs_diff(y, torch::layer_norm(x, {64}, in.weight, in.bias, 1e-5)), 2e-5);
}

// The part rule the CUDA backward walks (CTA p's warp w takes rows p * 4 + w, then every
// 4 * parts rows): each row in exactly one part, the one norm_part_of_row names.
TEST(FusedNorm, EveryRowInTheOnePartItsRuleNames) {
  for (const int64_t rows : {1, 31, 32, 33, 1000, 40000}) {
    const int64_t parts = norm_parts(rows);
    ASSERT_GE(parts, 1);
    ASSERT_LE(parts, kNormMaxParts);
    std::vector<int> seen(size_t(rows), 0);
    for (int64_t p = 0; p < parts; ++p)
      for (int64_t w = 0; w < kNormWarps; ++w)
        for (int64_t r = p * kNormWarps + w; r < rows; r += kNormWarps * parts) {
          ++seen[size_t(r)];
          ASSERT_EQ(norm_part_of_row(r, parts), p) << "row " << r;
        }
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(seen[size_t(r)], 1) << "row " << r;
  }
}

TEST(FusedNorm, RefusesWhatTheKernelsDoNotTake) {
  const auto w = torch::ones({48}), b = torch::zeros({48});
  EXPECT_NE(fused_norm_unsupported(torch::randn({2, 48}), w, b).find("width 48"),
            std::string::npos);
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 48}), w, b, 1e-5, torch::kFloat),
               std::invalid_argument);
  const auto w64 = torch::ones({64}), b64 = torch::zeros({64});
  EXPECT_NE(
      fused_norm_unsupported(torch::randn({2, 64}, torch::kBFloat16), w64, b64).find("float32"),
      std::string::npos);
  EXPECT_NE(fused_norm_unsupported(torch::randn({2, 64}), torch::ones({32}), b64).find("[64]"),
            std::string::npos);
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 64}), w64, b64, 1e-5, torch::kHalf),
               std::invalid_argument);
  EXPECT_EQ(fused_norm_unsupported(torch::randn({2, 64}), w64, b64), "");
}

TEST(FusedNorm, CountsTheLaunchesAGpuMakes) {
  auto in = layer_norm_inputs(10, 64, 5);
  const int64_t before = norm_kernel_launches();
  const auto y = fused_layer_norm(in.x, in.weight, in.bias, 1e-5, torch::kFloat);
  EXPECT_EQ(norm_kernel_launches() - before, kNormForwardLaunches);
  y.sum().backward();
  EXPECT_EQ(norm_kernel_launches() - before, kNormForwardLaunches + kNormBackwardLaunches);
}

}  // namespace
}  // namespace combiner::ops
