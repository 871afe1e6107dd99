// The plans themselves: Combiner plans split Omega_i exactly, and a few positions checked by hand.
#include <gtest/gtest.h>

#include "attention/plan.h"
#include "attention_cases.h"

#include <algorithm>

namespace combiner::attention {
namespace {

using Positions = std::vector<int64_t>;

Positions span_positions(const PositionPlan& plan, size_t r) {
  return plan.spans.at(r).positions;
}

TEST(AttentionPlan, CombinerPlansPartitionThePrefix) {
  for (const auto& c : testing::all_cases()) {
    if (!is_combiner(c.type) || c.abstraction != "max") continue;
    for (const auto& plan : make_plans(c.options(), c.length))
      for (int64_t i = 0; i < c.length; ++i) {
        const auto& p = plan[i];
        std::vector<int64_t> seen = p.direct;
        EXPECT_TRUE(std::count(p.direct.begin(), p.direct.end(), i) == 1) << c << " i=" << i;
        for (const auto& span : p.spans) {
          EXPECT_FALSE(span.positions.empty()) << c << " i=" << i;
          seen.insert(seen.end(), span.positions.begin(), span.positions.end());
        }
        std::sort(seen.begin(), seen.end());
        Positions prefix(i + 1);
        for (int64_t j = 0; j <= i; ++j) prefix[j] = j;
        EXPECT_EQ(seen, prefix) << c << " i=" << i;  // disjoint and covering
      }
  }
}

TEST(AttentionPlan, SparseSupportsByHand) {
  // fixed, s = 4: own block up to i, plus the last position of each earlier block.
  EXPECT_EQ(plan_position("fixed", 9, 12, 4, 4).direct, Positions({3, 7, 8, 9}));
  EXPECT_EQ(plan_position("fixed", 11, 12, 4, 4).direct, Positions({3, 7, 8, 9, 10, 11}));
  // logsparse: 13 = 8 + 4 + 1 -> spans [0,8), [8,12), [12,13), last positions 7, 11, 12.
  EXPECT_EQ(plan_position("logsparse", 13, 16, 4, 4).direct, Positions({7, 11, 12, 13}));
  EXPECT_EQ(plan_position("logsparse", 0, 16, 4, 4).direct, Positions({0}));
  // axial, W = 4: (2, 1) -> row 2 up to column 1, column 1 above.
  EXPECT_EQ(plan_position("axial", 9, 12, 4, 4).direct, Positions({1, 5, 8, 9}));
}

TEST(AttentionPlan, CombinerSpansByHand) {
  auto logsparse = plan_position("combiner-logsparse", 13, 16, 4, 4);
  EXPECT_EQ(logsparse.direct, Positions({13}));
  ASSERT_EQ(logsparse.spans.size(), 3u);
  EXPECT_EQ(span_positions(logsparse, 1), Positions({8, 9, 10, 11}));
  EXPECT_EQ(span_positions(logsparse, 2), Positions({12}));

  auto fixed = plan_position("combiner-fixed", 10, 20, 3, 5);  // block 3 = [9, 12)
  EXPECT_EQ(fixed.direct, Positions({9, 10}));
  ASSERT_EQ(fixed.spans.size(), 3u);
  EXPECT_EQ(span_positions(fixed, 2), Positions({6, 7, 8}));

  // W = 4, i = 9 = (2, 1).
  auto vertical = plan_position("combiner-axial-vertical", 9, 12, 4, 4);
  ASSERT_EQ(vertical.spans.size(), 3u);  // columns 0, 2, 3 above row 2
  EXPECT_EQ(span_positions(vertical, 0), Positions({0, 4}));
  EXPECT_EQ(span_positions(vertical, 2), Positions({3, 7}));

  auto horizontal = plan_position("combiner-axial-horizontal", 9, 12, 4, 4);
  ASSERT_EQ(horizontal.spans.size(), 4u);  // rows 0, 1: left {c < 1}, right {c > 1}
  EXPECT_EQ(span_positions(horizontal, 0), Positions({0}));
  EXPECT_EQ(span_positions(horizontal, 1), Positions({2, 3}));
  EXPECT_EQ(span_positions(horizontal, 3), Positions({6, 7}));

  auto rowmajor = plan_position("combiner-axial-rowmajor", 9, 12, 4, 4);
  EXPECT_EQ(rowmajor.direct, Positions({8, 9}));
  ASSERT_EQ(rowmajor.spans.size(), 2u);
  EXPECT_EQ(span_positions(rowmajor, 1), Positions({4, 5, 6, 7}));
  EXPECT_EQ(rowmajor.spans[1].query_position, 5);

  EXPECT_EQ(plan_names("combiner-mixture").size(), 2u);
}

}  // namespace
}  // namespace combiner::attention
