// split_heads (attention/heads.h): the q, k, v views of a packed projection, and its gradient:
// the fused path's gradients written straight into one packed tensor (passed on with no copy),
// every other path's stacked; both equal to the gradient through unbind.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/heads.h"
#include "tensor_checks.h"

// A namespace of this file's own: its kB, kH and kD would meet another file's in a unity batch.
namespace combiner::attention::heads_test {
namespace {

using combiner::testing::max_abs_diff;

constexpr int64_t kB = 2, kH = 2, kD = 8;

// What the model did before split_heads: view, permute, unbind.
std::vector<torch::Tensor> unbound(const torch::Tensor& qkv, int64_t heads) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (3 * heads);
  return qkv.view({B, L, 3, heads, D}).permute({2, 0, 3, 1, 4}).unbind(0);
}

TEST(SplitHeads, ViewsOfTheProjection) {
  const auto qkv = torch::randn({kB, 5, 3 * kH * kD});
  const auto heads = split_heads(qkv, kH);
  const auto want = unbound(qkv, kH);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(heads[i].sizes(), torch::IntArrayRef({kB, kH, 5, kD}));
    EXPECT_TRUE(torch::equal(heads[i], want[i])) << "part " << i;
    EXPECT_TRUE(heads[i].storage().is_alias_of(qkv.storage())) << "part " << i << " is a copy";
  }
  EXPECT_TRUE(packed_parts(heads[0], heads[1], heads[2]).defined());
  EXPECT_THROW(split_heads(torch::randn({kB, 5, 3 * kH * kD + 1}), kH), c10::Error);
}

TEST(SplitHeads, PackedPartsTakeOnlyTheirOwnLayout) {
  const auto qkv = torch::randn({kB, 5, 3 * kH * kD});
  const auto h = split_heads(qkv, kH);
  const auto packed = packed_parts(h[0], h[1], h[2]);
  ASSERT_TRUE(packed.defined());
  EXPECT_EQ(packed.data_ptr(), qkv.data_ptr());
  EXPECT_TRUE(torch::equal(packed.reshape(qkv.sizes()), qkv));
  EXPECT_FALSE(packed_parts(h[1], h[0], h[2]).defined());  // out of order
  EXPECT_FALSE(packed_parts(h[0], h[1], h[1]).defined());
  EXPECT_FALSE(packed_parts(h[0].contiguous(), h[1], h[2]).defined());
  const auto other = split_heads(qkv.clone(), kH);
  EXPECT_FALSE(packed_parts(h[0], other[1], other[2]).defined());  // another storage
  EXPECT_FALSE(packed_parts(h[0], h[1], torch::Tensor()).defined());
  const auto fresh = new_packed_parts(h[0]);
  EXPECT_TRUE(packed_parts(fresh[0], fresh[1], fresh[2]).defined());
  EXPECT_EQ(fresh[0].sizes(), h[0].sizes());
}

// Gradients that are not packed (any path but the fused one; one of them missing) are stacked.
TEST(SplitHeads, GradientEqualsUnbindsWhereStacked) {
  torch::manual_seed(3);
  const auto base = torch::randn({kB, 6, 3 * kH * kD});
  const auto g = torch::randn({kB, kH, 6, kD});
  auto through = [&](bool split, bool all_three) {
    auto qkv = base.clone().requires_grad_();
    const auto h = split ? split_heads(qkv, kH) : [&] {
      const auto u = unbound(qkv, kH);
      return std::array<torch::Tensor, 3>{u[0], u[1], u[2]};
    }();
    auto loss = (h[0] * h[1].exp() * g).sum();
    if (all_three) loss = loss + (h[2] * h[2]).sum();
    loss.backward();
    return qkv.grad();
  };
  for (const bool all_three : {true, false}) {
    const auto ours = through(true, all_three), theirs = through(false, all_three);
    EXPECT_EQ(ours.sizes(), theirs.sizes());
    EXPECT_TRUE(ours.is_contiguous());
    EXPECT_LT(max_abs_diff(ours, theirs), 1e-6) << "all three used: " << all_three;
  }
}

struct FusedHeadsCase {
  std::string type, abstraction;
  int64_t length, layout;
};

void PrintTo(const FusedHeadsCase& c, std::ostream* os) {
  *os << c.type << "/" << c.abstraction << "/L" << c.length << "/s" << c.layout;
}

class SplitHeadsFused : public ::testing::TestWithParam<FusedHeadsCase> {};

// The fused path given split_heads' views writes dq, dk, dv as the parts of one packed gradient
// (the max pools in the call adding into those parts in place): the same numbers as from
// contiguous copies of q, k and v, and the composed path's within rounding.
TEST_P(SplitHeadsFused, WritesThePackedGradient) {
  const auto& c = GetParam();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(17);
    auto m = make_attention({c.type, c.layout, c.layout, c.abstraction}, c.length, kD);
    m->to(dtype);
    const auto base = torch::randn({kB, c.length, 3 * kH * kD}).to(dtype);
    const auto g = torch::randn({kB, kH, c.length, kD}).to(dtype);
    auto run = [&](AttentionImpl::Path path, bool split) {
      m->set_path(path);
      auto qkv = base.clone().requires_grad_();
      const auto h = split_heads(qkv, kH);
      std::vector<torch::Tensor> in;
      for (const auto& x : h) in.push_back(split ? x : x.contiguous());
      const auto out = m->forward(in[0], in[1], in[2]);
      const auto parts = torch::autograd::grad({out}, {h[0], h[1], h[2]}, {g}, true);
      (out * g).sum().backward();
      return std::make_pair(qkv.grad(), parts);
    };
    const auto [packed, parts] = run(AttentionImpl::Path::kFused, true);
    const auto [copied, copied_parts] = run(AttentionImpl::Path::kFused, false);
    const auto [composed, composed_parts] = run(AttentionImpl::Path::kComposed, true);
    // Passed on as written where the fused call is q's, k's and v's only reader: the max pools
    // run in the call, and the mixture's second call adds into the first's parts; a mean or
    // DeepSets pool is an op of its own whose gradient autograd adds.
    const bool sole_reader = c.abstraction == "max";
    EXPECT_EQ(packed_parts(parts[0], parts[1], parts[2]).defined(), sole_reader)
        << c10::toString(dtype);
    EXPECT_FALSE(packed_parts(copied_parts[0], copied_parts[1], copied_parts[2]).defined());
    EXPECT_TRUE(torch::equal(packed, copied))
        << c10::toString(dtype) << ": " << max_abs_diff(packed, copied);
    const double tol = dtype == torch::kFloat ? 2e-5 : 0.1;
    EXPECT_LT(max_abs_diff(packed, composed), tol) << c10::toString(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants,
    SplitHeadsFused,
    ::testing::Values(FusedHeadsCase{"combiner-fixed", "max", 40, 12},
                      FusedHeadsCase{"combiner-fixed", "mean", 40, 12},
                      FusedHeadsCase{"combiner-axial-rowmajor", "max", 40, 8},
                      FusedHeadsCase{"combiner-axial-vertical", "max", 40, 8},
                      FusedHeadsCase{"combiner-axial-vertical", "deepsets-max", 40, 8},
                      FusedHeadsCase{"combiner-axial-horizontal", "max", 40, 8},
                      FusedHeadsCase{"combiner-axial-horizontal", "mean", 40, 8},
                      FusedHeadsCase{"combiner-mixture", "max", 40, 8}));

}  // namespace
}  // namespace combiner::attention::heads_test
