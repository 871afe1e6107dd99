// The linear op whose backward makes the bias's gradient with the bias-gradient kernels
// (ops/linear.h) on their CPU model: its numbers against at::linear's autograd, the kernels' sums
// and order, what it refuses and what it counts (against float64 at every size:
// kernel-check's linear table, tests/tools/linear_check_test.cpp).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <vector>

#include "ops/bias_grad_kernel.h"
#include "ops/linear.h"
#include "tensor_checks.h"

namespace combiner::ops {
namespace {

using combiner::testing::max_abs_diff;

// The same layer through at::linear (and at::gelu) and through fused_linear, float32: outputs
// and the gradients of x and weight are LibTorch's own ops, so equal; the bias's sums differ from
// at::sum's only in their order.
TEST(FusedLinear, Float32IsAtLinearsForwardAndBackward) {
  for (const bool gelu : {false, true}) {
    torch::manual_seed(3);
    const auto x0 = torch::randn({2, 37, 24}), w0 = torch::randn({40, 24}) * 0.2,
               b0 = torch::randn({40}), dy = torch::randn({2, 37, 40});
    auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
         b = b0.clone().requires_grad_();
    auto y = fused_linear(x, w, b, gelu, torch::kFloat);
    y.backward(dy);
    auto xr = x0.clone().requires_grad_(), wr = w0.clone().requires_grad_(),
         br = b0.clone().requires_grad_();
    auto yr = at::linear(xr, wr, br);
    if (gelu) yr = torch::gelu(yr);
    yr.backward(dy);
    EXPECT_EQ(y.sizes(), yr.sizes());
    EXPECT_LT(max_abs_diff(y, yr), 1e-5) << gelu;
    EXPECT_LT(max_abs_diff(x.grad(), xr.grad()), 1e-5) << gelu;
    EXPECT_LT(max_abs_diff(w.grad(), wr.grad()), 1e-4) << gelu;
    EXPECT_LT(max_abs_diff(b.grad(), br.grad()), 1e-4) << gelu;
    EXPECT_EQ(b.grad().scalar_type(), torch::kFloat);
  }
}

// bfloat16 as autocast runs it on a GPU: x and the weight cast and kept in bf16, the products
// float32 sums rounded to bf16 (ops/gemm.h), x's gradient cast back to its dtype; the bias's
// gradient float32 from the float32 sums of the bf16 d_pre written, and the weight's the float32
// sums of d_pre^T x, not rounded to bf16.
TEST(FusedLinear, BFloat16KeepsTheDtypesAutocastWouldAndSumsTheBiasInFloat32) {
  torch::manual_seed(4);
  const auto x = torch::randn({64, 32}).requires_grad_(),
             w = (torch::randn({16, 32}) * 0.2).requires_grad_(),
             b = torch::randn({16}).requires_grad_();
  const auto dy = torch::randn({64, 16}).to(torch::kBFloat16);
  const auto y = fused_linear(x, w, b, true, torch::kBFloat16);
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  y.backward(dy);
  EXPECT_EQ(x.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(b.grad().scalar_type(), torch::kFloat);
  // d_pre as the kernels write it (bf16), from pre = the bf16 linear.
  const auto xb = x.detach().to(torch::kBFloat16), wb = w.detach().to(torch::kBFloat16);
  const auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
  const auto pre =
      at::addmm(f32(b.detach().to(torch::kBFloat16)), f32(xb), f32(wb).t()).to(torch::kBFloat16);
  const auto d_pre =
      torch::gelu_backward(dy.to(torch::kFloat), pre.to(torch::kFloat)).to(torch::kBFloat16);
  EXPECT_LT(max_abs_diff(y, torch::gelu(pre)), 1e-6);
  EXPECT_LT(max_abs_diff(b.grad(), d_pre.to(torch::kDouble).sum(0)), 1e-4);
  const auto dw64 = d_pre.to(torch::kDouble).t().mm(xb.to(torch::kDouble));
  EXPECT_LT(max_abs_diff(w.grad(), dw64), 1e-5 * dw64.abs().max().item<double>());
  EXPECT_LT(max_abs_diff(x.grad(), f32(d_pre).mm(f32(wb)).to(torch::kBFloat16)), 1e-6);
}

// The kernels' CPU model: a column sum in the kernels' order, float32, and with GELU d_pre as
// LibTorch's gelu_backward makes it, rounded once to the storage dtype; over several parts
// (rows 2000: 32 parts) and past the 32 slices (rows 3000: 47 parts).
TEST(BiasGradKernels, ModelSumsColumnsAndMakesGeluBackward) {
  for (const int64_t rows : {1, 65, 2000, 3000})
    for (const auto dtype : {torch::kFloat, torch::kBFloat16})
      for (const bool gelu : {false, true}) {
        torch::manual_seed(uint64_t(rows));
        const int64_t cols = 264;
        const auto dy = torch::randn({rows, cols}).to(dtype),
                   pre = torch::randn({rows, cols}).to(dtype);
        auto d_pre = torch::empty_like(dy);
        const int64_t parts = bias_grad_parts(rows);
        auto partial = torch::empty({parts, cols}), db = torch::empty({cols});
        BiasGrad g;
        g.rows = rows;
        g.cols = cols;
        g.parts = parts;
        g.dy = dy.data_ptr();
        g.dtype = dtype == torch::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32;
        if (gelu) {
          g.pre = pre.data_ptr();
          g.d_pre = d_pre.data_ptr();
        }
        g.partial = partial.data_ptr<float>();
        g.dbias = db.data_ptr<float>();
        bias_grad_cpu(g);
        const auto summed = gelu ? d_pre : dy;
        if (gelu) {
          const auto expected =
              torch::gelu_backward(dy.to(torch::kFloat), pre.to(torch::kFloat)).to(dtype);
          // float32's erf and exp against LibTorch's: an ulp of the storage dtype at most.
          EXPECT_LT(max_abs_diff(d_pre, expected), dtype == torch::kFloat ? 1e-6 : 2e-2)
              << rows << " " << dtype;
        }
        EXPECT_LT(max_abs_diff(db, summed.to(torch::kDouble).sum(0)),
                  2e-5 * std::sqrt(double(rows)))
            << rows << " " << dtype << " " << gelu;
        // The parts' sums add up to db in a fixed order: part p holds rows of its own.
        EXPECT_LT(max_abs_diff(partial.sum(0), db), 1e-4);
      }
}

TEST(BiasGradKernels, PartsAreFixedByTheRowsAlone) {
  EXPECT_EQ(bias_grad_parts(0), 1);
  EXPECT_EQ(bias_grad_parts(64), 1);
  EXPECT_EQ(bias_grad_parts(65), 2);
  EXPECT_EQ(bias_grad_parts(49152), 768);
  EXPECT_EQ(bias_grad_parts(int64_t(1) << 20), kBiasMaxParts);
  // Every row belongs to one part, each part's rows in its own warps' strides.
  std::vector<int> rows_of(3, 0);
  for (int64_t r = 0; r < 3 * 64; ++r) ++rows_of[size_t(bias_grad_part_of_row(r, 3))];
  EXPECT_EQ(rows_of, (std::vector<int>{64, 64, 64}));
}

TEST(FusedLinear, RefusesWhatTheKernelsCannotTakeInOneLine) {
  auto why = [](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    try {
      fused_linear(x, w, b, false, torch::kFloat);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  const auto x = torch::randn({3, 16});
  EXPECT_EQ(why(x, torch::randn({12, 16}), torch::randn({12})),
            "fused linear: out 12 is not a multiple of 8");
  EXPECT_EQ(why(x, torch::randn({8, 16}), torch::Tensor()),
            "fused linear: the bias must be float32 or bfloat16 [8] on x's device");
  EXPECT_EQ(why(x, torch::randn({8, 15}), torch::randn({8})),
            "fused linear: the weight must be float32 or bfloat16 [out, 16] on x's device, got "
            "[8, 15]");
  EXPECT_EQ(why(x.to(torch::kDouble), torch::randn({8, 16}), torch::randn({8})),
            "fused linear: x must be float32 or bfloat16 [..., in], got Double [3, 16]");
}

// The weight's gradient under autocast is float32 sums: against float64 within float32's
// rounding where bfloat16's would be some 100 times larger, over more rows than the CPU model
// widens at once (1,024), with and without GELU.
TEST(FusedLinear, BFloat16WeightGradientIsFloat32Sums) {
  for (const bool gelu : {false, true}) {
    torch::manual_seed(gelu ? 6 : 5);
    const auto x = torch::randn({2500, 24}).to(torch::kBFloat16).requires_grad_(),
               w = (torch::randn({16, 24}) * 0.2).requires_grad_(),
               b = torch::randn({16}).requires_grad_();
    const auto dy = torch::randn({2500, 16}).to(torch::kBFloat16);
    fused_linear(x, w, b, gelu, torch::kBFloat16).backward(dy);
    ASSERT_EQ(w.grad().scalar_type(), torch::kFloat);
    auto d_pre = dy;
    if (gelu) {
      const auto pre = at::addmm(
          b.detach().to(torch::kBFloat16), x.detach(), w.detach().to(torch::kBFloat16).t());
      d_pre =
          torch::gelu_backward(dy.to(torch::kFloat), pre.to(torch::kFloat)).to(torch::kBFloat16);
    }
    const auto dw64 = d_pre.to(torch::kDouble).t().mm(x.detach().to(torch::kDouble));
    const double scale = dw64.abs().max().item<double>();
    // GELU's derivative here is float32's erf against LibTorch's: an ulp of d_pre at most, in a
    // few elements.
    EXPECT_LT(max_abs_diff(w.grad(), dw64), (gelu ? 2e-4 : 1e-5) * scale) << gelu;
    EXPECT_GT(max_abs_diff(w.grad().to(torch::kBFloat16), w.grad()), 1e-4 * scale) << gelu;
  }
}

TEST(FusedLinear, CountsTwoLaunchesPerBackwardAndNoneForward) {
  const auto x = torch::randn({5, 16}).requires_grad_();
  const auto w = torch::randn({8, 16}).requires_grad_(), b = torch::randn({8}).requires_grad_();
  const int64_t before = bias_grad_launches();
  auto y = fused_linear(x, w, b, true, torch::kFloat);
  EXPECT_EQ(bias_grad_launches(), before);
  y.sum().backward();
  EXPECT_EQ(bias_grad_launches(), before + kBiasGradLaunches);
}

}  // namespace
}  // namespace combiner::ops
