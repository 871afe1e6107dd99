// fused_launch::LaunchTimes (attention/fused/launch.h): every call of the fused family while one
// lives, in order, with what it ran and the kernels it launches on a GPU; nothing recorded
// outside one, and the outer one back after an inner one ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "attention/attention.h"
#include "attention/fused/fused.h"
#include "attention/fused/launch.h"

namespace combiner::attention {
namespace {

torch::Tensor forward_backward(AttentionImpl& m, int64_t L) {
  torch::manual_seed(5);
  auto q = torch::randn({1, 2, L, 8}).requires_grad_(), k = torch::randn({1, 2, L, 8}),
       v = torch::randn({1, 2, L, 8});
  auto out = m.forward(q, k, v);
  out.sum().backward();
  return q.grad();
}

TEST(LaunchTimes, RecordsEveryCallInOrder) {
  auto m = make_attention({"combiner-axial-vertical", 8, 8, "max"}, 64, 8);
  m->set_path(AttentionImpl::Path::kFused);
  forward_backward(*m, 64);  // not recorded: no LaunchTimes alive
  std::vector<fused_launch::LaunchTime> times;
  const int64_t before = fused_kernel_launches();
  {
    fused_launch::LaunchTimes timer;
    forward_backward(*m, 64);
    times = timer.times();
  }
  ASSERT_FALSE(times.empty());
  int64_t kernels = 0;
  for (const auto& t : times) {
    kernels += t.kernels;
    EXPECT_GE(t.ms, 0.0) << t.what;
    EXPECT_FALSE(t.what.empty());
  }
  EXPECT_EQ(kernels, fused_kernel_launches() - before);
  // Forward: the local pass that makes u, and with it the pools (ks from k, written; qs from q,
  // in its tiles alone: each column is one tile), the joint passes. Backward: the column pass,
  // which reads no summary and makes delta from o and d_o as its tiles land; then the summary
  // slots, which were not kept: u and ks made again by the local pass, the row pass with its
  // spans, the local pass (its queries pooled again in its tiles, the pools' backward in its
  // epilogue), whose delta the row pass makes as it stores u's gradient. Each pass's segments
  // fit one tile: its backward is one launch (kernel_plan.h segment_backward).
  const std::string local = "queries 8 x 7, keys 8 x 7, causal, running max pools in its tiles";
  const std::string row = "queries 8 x 8, keys 8 x 8, causal, + summaries 8 x 8, others";
  const std::string column = "queries 8 x 8, keys 8 x 8, strict";
  const std::vector<std::string> expected = {
      "forward: " + local,
      "forward: " + row,
      "forward (merged): " + column,
      "backward (one CTA per segment): " + column + ", making delta",
      "forward: " + local,
      "backward (one CTA per segment): " + row + ", and u's delta",
      "backward (one CTA per segment): " + local + ", and their backward"};
  std::vector<std::string> what;
  for (const auto& t : times) what.push_back(t.what);
  EXPECT_EQ(what, expected);
}

// horizontal's four pools (prefix and suffix of k and of q) where a row is more than one tile
// (rows of 72): its local passes make them, forward and backward (tests/attention/pooled_test.cpp),
// but the scan kernel takes their backward over each row's 71 steps whose summaries are read
// (FusedPool::read_steps): each half's in one launch (two scans of one side add into the same
// gradient, so a launch holds one scan of each side).
TEST(LaunchTimes, PoolsShareLaunchesButNotAGradient) {
  auto m = make_attention({"combiner-axial-horizontal", 72, 72, "max"}, 216, 8);
  m->set_path(AttentionImpl::Path::kFused);
  std::vector<fused_launch::LaunchTime> times;
  {
    fused_launch::LaunchTimes timer;
    forward_backward(*m, 216);
    times = timer.times();
  }
  std::vector<std::string> pools;
  for (const auto& t : times)
    if (t.what.rfind("running max", 0) == 0) pools.push_back(t.what);
  const std::string part = "32 lines of 71", reversed = part + ", reversed";
  const std::vector<std::string> expected = {
      "running max backward: " + part + " + " + part,
      "running max backward: " + reversed + " + " + reversed};
  EXPECT_EQ(pools, expected);
}

TEST(LaunchTimes, NestedTimersRecordIntoTheInnermost) {
  auto m = make_attention({"combiner-fixed", 8, 8, "max"}, 32, 8);
  m->set_path(AttentionImpl::Path::kFused);
  fused_launch::LaunchTimes outer;
  {
    fused_launch::LaunchTimes inner;
    forward_backward(*m, 32);
    EXPECT_FALSE(inner.times().empty());
  }
  EXPECT_TRUE(outer.times().empty());
  forward_backward(*m, 32);
  EXPECT_FALSE(outer.times().empty());
}

}  // namespace
}  // namespace combiner::attention
