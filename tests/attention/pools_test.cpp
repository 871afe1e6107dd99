// The max-pool kernels' CPU model (fused/kernel.h RunningMax and SegmentMax, the algorithms
// kernel_scan.cu runs) against LibTorch: the running max's values equal torch::cummax's and its
// gradients cumulative_max's with the arg-maxes torch::cummax kept (its scatter-add), in both
// directions, along an inner and an outer axis, on strided views as the variants pass them (of k
// itself, or of k as a view of the qkv projection, read in place), with ties and NaN; the segment
// max's values and gradients equal LibTorch's max over the narrowed segments (ties to the first),
// its gradient covering every row of x. Both write their output and gradient in the caller's
// axis order, contiguous; the running max of whole segments gives x's whole gradient.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>

#include "attention/fused/fused.h"
#include "attention/fused/kernel.h"
#include "attention/fused/launch.h"
#include "attention/summary.h"
#include "util/device.h"

namespace combiner::attention {
namespace {

struct ScanCase {
  torch::ScalarType dtype;
  int64_t dim;
  bool reverse;
};

// [B, H, S, W, D] viewed as the axial variants see k: the first S whole rows of [B, H, L, D].
torch::Tensor rows_of(const torch::Tensor& k, int64_t S, int64_t W) {
  return k.narrow(2, 0, S * W).view({k.size(0), k.size(1), S, W, k.size(3)});
}

class RunningMax : public ::testing::TestWithParam<ScanCase> {};

// k [B, H, L, D] as the model passes it: a view of the fused qkv projection [B, L, 3, H, D], so
// a row of W positions is not one block of memory (its column stride is 3 H D).
torch::Tensor projection_view(const torch::Tensor& k) {
  const auto qkv = torch::zeros({k.size(0), k.size(2), 3, k.size(1), k.size(3)}, k.options());
  auto view = qkv.select(2, 1).permute({0, 2, 1, 3});
  view.copy_(k);
  return view;
}

TEST_P(RunningMax, MatchesCummaxValuesAndScatterGradients) {
  const auto c = GetParam();
  torch::manual_seed(3);
  // Small integers: many ties, which must go to the later step as torch::cummax sends them.
  const auto k_whole = torch::randint(-3, 4, {2, 3, 7 * 5 + 2, 4}).to(c.dtype);
  for (const auto& k : {k_whole, projection_view(k_whole)}) {
    SCOPED_TRACE(k.is_contiguous() ? "k contiguous" : "k a view of the qkv projection");
    auto x = rows_of(k, 7, 5).detach().requires_grad_(true);
    ASSERT_FALSE(x.is_contiguous());
    auto y = fused_running_max(x, c.dim, c.reverse);
    const auto flipped = [&](const torch::Tensor& t) { return c.reverse ? t.flip(c.dim) : t; };
    const auto expected = flipped(std::get<0>(torch::cummax(flipped(x.detach()), c.dim)));
    EXPECT_TRUE(torch::equal(y.detach(), expected));

    auto x_ref = x.detach().clone().requires_grad_(true);
    auto y_ref = cumulative_max(x_ref, c.dim, c.reverse, /*keep_indices=*/true);
    const auto g = torch::randn(y.sizes()).to(c.dtype);
    y.backward(g);
    y_ref.backward(g);
    const double tol =
        c.dtype == torch::kBFloat16 ? 1e-2 : c.dtype == torch::kFloat ? 1e-5 : 1e-12;
    EXPECT_TRUE(torch::allclose(
        x.grad().to(torch::kDouble), x_ref.grad().to(torch::kDouble), tol, tol))
        << (x.grad() - x_ref.grad()).abs().max();
    // Every gradient lands on an arg-max: the rest are exactly zero.
    EXPECT_GT((x.grad() == 0).sum().item<int64_t>(), 0);
    EXPECT_TRUE(torch::equal(x.grad() == 0, x_ref.grad() == 0));
    // Output and gradient come in the caller's axis order, contiguous: nothing to copy.
    EXPECT_TRUE(y.is_contiguous());
    EXPECT_TRUE(x.grad().is_contiguous());

    // The same scan taken of k's whole rows: the same values, and k's whole gradient, the rows
    // past the segments zero.
    auto k_leaf = k.detach().requires_grad_(true);  // the same strides
    auto y_rows = fused_running_max_of_segments(k_leaf, 7, 5, c.dim, c.reverse);
    EXPECT_TRUE(torch::equal(y_rows.detach(), expected));
    EXPECT_TRUE(y_rows.is_contiguous());
    y_rows.backward(g);
    ASSERT_EQ(k_leaf.grad().sizes(), k.sizes());
    EXPECT_TRUE(torch::equal(rows_of(k_leaf.grad(), 7, 5), x.grad()));
    EXPECT_TRUE(torch::equal(k_leaf.grad().narrow(2, 35, 2),
                             torch::zeros({2, 3, 2, 4}).to(c.dtype)));
  }
}

// Down the rows of a projection view, the scan reads k in place: it keeps no copy of its input
// for backward, only its output is new.
TEST(RunningMaxEdges, ScansAProjectionViewInPlace) {
  util::count_cpu_tensor_bytes();
  const torch::Device cpu(torch::kCPU);
  const auto k = projection_view(torch::randn({2, 3, 64 * 16, 32}));
  const auto x = rows_of(k, 64, 16).detach().requires_grad_(true);  // autograd saves what it scans
  const double before = util::device_allocated_mib(cpu);
  const auto y = fused_running_max(x, 2, false);
  const double grown = util::device_allocated_mib(cpu) - before;
  const double y_mib = double(y.numel()) * 4 / (1024.0 * 1024.0);
  EXPECT_NEAR(grown, y_mib, 0.01) << "the output alone is " << y_mib << " MiB";
}

INSTANTIATE_TEST_SUITE_P(AlongRowsAndColumns,
                         RunningMax,
                         ::testing::Values(ScanCase{torch::kDouble, 2, false},
                                           ScanCase{torch::kDouble, 3, true},
                                           ScanCase{torch::kFloat, 2, true},
                                           ScanCase{torch::kFloat, 3, false},
                                           ScanCase{torch::kBFloat16, 2, false},
                                           ScanCase{torch::kBFloat16, 3, true}));

TEST(RunningMaxEdges, NaNTakesOverAsInCummax) {
  auto x = torch::tensor({1.0, 5.0, std::nan(""), 7.0, 2.0}).view({1, 5, 1});
  const auto y = fused_running_max(x, 1, false);
  const auto expected = std::get<0>(torch::cummax(x, 1));
  EXPECT_EQ(y.view(-1)[1].item<double>(), 5.0);
  EXPECT_TRUE(std::isnan(y.view(-1)[3].item<double>()));
  EXPECT_TRUE(torch::equal(torch::isnan(y), torch::isnan(expected)));
}

TEST(RunningMaxEdges, OneLaunchEachWay) {
  auto x = torch::randn({2, 6, 3}, torch::requires_grad());
  const int64_t before = fused_kernel_launches();
  auto y = fused_running_max(x, 1, true);
  EXPECT_EQ(fused_kernel_launches() - before, 1);
  y.sum().backward();
  EXPECT_EQ(fused_kernel_launches() - before, 2);
}

// Of whole segments: one kernel each way (tests/tools/launch_count_test.cpp holds the variants'
// glue around it to its bounds), and bad segments or axes refused.
TEST(RunningMaxEdges, OfSegmentsOneLaunchEachWayAndBadSegmentsRefused) {
  auto k = torch::randn({1, 2, 4 * 6 + 3, 8}, torch::requires_grad());
  const int64_t before = fused_kernel_launches();
  auto y = fused_running_max_of_segments(k, 4, 6, 2, false);
  EXPECT_EQ(fused_kernel_launches() - before, 1);
  y.sum().backward();
  EXPECT_EQ(fused_kernel_launches() - before, 2);
  EXPECT_THROW(fused_running_max_of_segments(k, 5, 6, 2, false), c10::Error);  // 30 rows of 27
  EXPECT_THROW(fused_running_max_of_segments(k, 4, 6, 4, false), c10::Error);
}

class SegmentMax : public ::testing::TestWithParam<torch::ScalarType> {};

TEST_P(SegmentMax, MatchesTheLibTorchPoolOfTheSegments) {
  const auto dtype = GetParam();
  torch::manual_seed(5);
  // 7 segments of 5 rows and 3 rows past them; D 4 read from rows of 8 (a strided view); small
  // integers: ties, which go to the first as LibTorch's max sends them.
  const auto wide = torch::randint(-3, 4, {2, 3, 7 * 5 + 3, 8}).to(dtype);
  auto x = wide.narrow(3, 0, 4).detach().requires_grad_(true);
  auto y = fused_segment_max(x, 7, 5);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto y_ref = std::get<0>(x_ref.narrow(2, 0, 35).reshape({2, 3, 7, 5, 4}).max(3));
  EXPECT_TRUE(torch::equal(y.detach(), y_ref.detach()));
  const auto g = torch::randn(y.sizes()).to(dtype);
  y.backward(g);
  y_ref.backward(g);
  EXPECT_TRUE(torch::equal(x.grad(), x_ref.grad())) << (x.grad() - x_ref.grad()).abs().max();
  EXPECT_TRUE(torch::equal(x.grad().narrow(2, 35, 3), torch::zeros({2, 3, 3, 4}).to(dtype)));
}

INSTANTIATE_TEST_SUITE_P(Dtypes,
                         SegmentMax,
                         ::testing::Values(torch::kDouble, torch::kFloat, torch::kBFloat16));

TEST(SegmentMaxEdges, OneLaunchEachWayAndBadSegmentsRefused) {
  auto x = torch::randn({1, 2, 12, 3}, torch::requires_grad());
  const int64_t before = fused_kernel_launches();
  auto y = fused_segment_max(x, 3, 4);
  EXPECT_EQ(fused_kernel_launches() - before, 1);
  y.sum().backward();
  EXPECT_EQ(fused_kernel_launches() - before, 2);
  EXPECT_THROW(fused_segment_max(x, 4, 4), c10::Error);  // 16 rows of 12
}

// A bfloat16 call's float32 summary gradient is added into dx as it is (SegmentMax::dy_acc, as
// fused calls pass it): each arg-max's element becomes round(dx + dy), rounded once, where a cast
// of dy to bfloat16 first would round twice; every other element is left as it was.
TEST(SegmentMaxEdges, AFloatGradientIsAddedAsItIs) {
  torch::manual_seed(4);
  const int64_t segments = 3, len = 4;
  const auto x = torch::randn({1, 2, 12, 8}).to(torch::kBFloat16);
  const auto dx_before = torch::randn({1, 2, 12, 8}).to(torch::kBFloat16);
  const auto dy = torch::randn({1, 2, segments, 8}) / 3;  // float32, most not bfloat16 values
  auto dx = dx_before.clone();
  fused::SegmentMaxes parts;
  parts.count = 1;
  fused::SegmentMax& m = parts.part[0];
  m.batch = 1;
  m.heads = 2;
  m.rows = 12;
  m.dim = 8;
  m.segments = segments;
  m.len = len;
  for (int d = 0; d < 3; ++d) m.stride[d] = m.dx_stride[d] = x.stride(d);
  m.dtype = fused::Dtype::kBFloat16;
  m.x = x.data_ptr();
  m.dy = dy.data_ptr();
  m.dx = dx.data_ptr();
  m.accumulate = true;
  m.dy_acc = true;
  fused_launch::segment_max_backward(x, parts);
  // LibTorch: the arg-max of each segment (ties to the first), dy added there in float32.
  const auto at = std::get<1>(x.view({1, 2, segments, len, 8}).max(3, /*keepdim=*/true));
  const auto onto = [&](const torch::Tensor& added) {
    auto sum = dx_before.to(torch::kFloat).view({1, 2, segments, len, 8});
    sum.scatter_add_(3, at, added.view({1, 2, segments, 1, 8}));
    return sum.view({1, 2, 12, 8}).to(torch::kBFloat16);
  };
  const auto once = onto(dy), twice = onto(dy.to(torch::kBFloat16).to(torch::kFloat));
  EXPECT_TRUE(torch::equal(dx, once));
  EXPECT_FALSE(torch::equal(dx, twice));  // the data tells one rounding from two
}

}  // namespace
}  // namespace combiner::attention
