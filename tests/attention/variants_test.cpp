// The four checks of docs/ATTENTION.md for every variant x abstraction x layout: fast output vs
// the dense reference, the shape of A, proportional rows within a span, causal gradients.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/plan.h"
#include "attention/reference.h"
#include "attention_cases.h"

#include <map>

namespace combiner::attention {
namespace {

using testing::Case;

class VariantTest : public ::testing::TestWithParam<Case> {
 protected:
  std::shared_ptr<AttentionImpl> make(const Case& c) {
    torch::manual_seed(7);  // DeepSets maps
    return make_attention(c.options(), c.length, testing::kDim);
  }
};

// Check 1: fast o == reference A v (float32 inputs, reference in float64).
TEST_P(VariantTest, MatchesReference) {
  const Case& c = GetParam();
  auto module = make(c);
  auto in = testing::random_inputs(c.length, torch::kFloat, 11);
  auto fast = module->forward(in.q, in.k, in.v);
  ASSERT_EQ(fast.sizes(), in.v.sizes());
  ASSERT_EQ(fast.scalar_type(), torch::kFloat);
  auto ref = reference_attention(c.options(), *module, in.q, in.k, in.v);
  const double err = (fast.to(torch::kDouble) - ref).abs().max().item<double>();
  EXPECT_LT(err, 1e-5);
}

// Check 2: rows sum to 1, nothing above the diagonal, full support (Combiner) or exactly S_i.
TEST_P(VariantTest, EffectiveMatrixShape) {
  const Case& c = GetParam();
  auto module = make(c);
  auto in = testing::random_inputs(c.length, torch::kFloat, 12);
  auto a = effective_matrix(c.options(), in.q, in.k, deepsets_maps(*module));
  const int64_t L = c.length;
  EXPECT_LT((a.sum(-1) - 1).abs().max().item<double>(), 1e-12);
  auto upper = torch::ones({L, L}, torch::kBool).triu(1);
  EXPECT_EQ(a.masked_select(upper).abs().max().item<double>(), 0.0);

  auto support = torch::zeros({L, L}, torch::kBool);
  if (is_combiner(c.type)) {
    support = upper.logical_not();
  } else {
    auto plan = make_plans(c.options(), L).at(0);
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j : plan[i].direct) support[i][j] = true;
  }
  EXPECT_GT(a.masked_select(support).min().item<double>(), 0.0);
  auto outside = support.logical_not();
  if (outside.any().item<bool>()) {
    EXPECT_EQ(a.masked_select(outside).abs().max().item<double>(), 0.0);
  }
}

// Check 3: all positions sharing a span (same positions, same local query) have proportional
// rows of A on that span's columns, in every plan.
TEST_P(VariantTest, SpanRowsProportional) {
  const Case& c = GetParam();
  auto module = make(c);
  auto in = testing::random_inputs(c.length, torch::kFloat, 13);
  auto matrices = plan_matrices(c.options(), in.q, in.k, deepsets_maps(*module));
  auto plans = make_plans(c.options(), c.length);
  ASSERT_EQ(matrices.size(), plans.size());
  int64_t shared = 0;
  for (size_t p = 0; p < plans.size(); ++p) {
    // span -> positions that have it
    std::map<std::pair<std::vector<int64_t>, int64_t>, std::vector<int64_t>> users;
    for (int64_t i = 0; i < c.length; ++i)
      for (const auto& span : plans[p][i].spans)
        users[{span.positions, span.query_position}].push_back(i);
    for (const auto& [span, rows] : users) {
      auto cols = torch::tensor(span.first, torch::kLong);
      auto first = matrices[p].select(2, rows[0]).index_select(-1, cols);
      first = first / first.sum(-1, true);
      for (size_t t = 1; t < rows.size(); ++t, ++shared) {
        auto other = matrices[p].select(2, rows[t]).index_select(-1, cols);
        other = other / other.sum(-1, true);
        EXPECT_LT((other - first).abs().max().item<double>(), 1e-12)
            << "plan " << p << " rows " << rows[0] << " and " << rows[t];
      }
    }
  }
  // The degenerate layouts (one row, one-column rows, one block) may share no span.
  if (is_combiner(c.type) && c.length >= 12) {
    EXPECT_GT(shared, 0);
  }
}

// Check 4: d o_i / d(q_j, k_j, v_j) is exactly zero for every j > i.
TEST_P(VariantTest, CausalGradients) {
  const Case& c = GetParam();
  auto module = make(c);
  auto in = testing::random_inputs(c.length, torch::kFloat, 14);
  for (int64_t i : {int64_t(0), c.length / 3, c.length / 2 + 1, c.length - 2}) {
    auto q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_();
    auto v = in.v.clone().requires_grad_();
    module->forward(q, k, v).select(2, i).sum().backward();
    for (const auto& g : {q.grad(), k.grad(), v.grad()}) {
      ASSERT_TRUE(g.defined());
      auto after = g.narrow(2, i + 1, c.length - i - 1);
      EXPECT_EQ(after.abs().max().item<double>(), 0.0) << "position " << i;
      // Position 0 sees only v_0, so its q and k gradients are zero too.
      if (i > 0) {
        EXPECT_GT(g.narrow(2, 0, i + 1).abs().max().item<double>(), 0.0) << "position " << i;
      }
    }
  }
}

// Running on a prefix (as the sampler does, any length) gives the full run's first outputs.
TEST_P(VariantTest, PrefixMatchesFullLength) {
  const Case& c = GetParam();
  auto module = make(c);
  auto in = testing::random_inputs(c.length, torch::kFloat, 15);
  auto full = module->forward(in.q, in.k, in.v);
  for (int64_t prefix : {int64_t(1), c.length / 2 + 1, c.length - 1}) {
    auto part = module->forward(
        in.q.narrow(2, 0, prefix), in.k.narrow(2, 0, prefix), in.v.narrow(2, 0, prefix));
    EXPECT_LT((part - full.narrow(2, 0, prefix)).abs().max().item<double>(), 1e-6)
        << "prefix " << prefix;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants,
                         VariantTest,
                         ::testing::ValuesIn(testing::all_cases()),
                         [](const auto& info) { return testing::case_name(info.param); });

}  // namespace
}  // namespace combiner::attention
