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
  // The pools first (ks from k and qs from q, one launch), then the local pass that makes u, then
  // the joint passes; the backward makes the pools and u again (they are not kept), then runs
  // the backward of each pass and the pools' backward last (one launch).
  EXPECT_EQ(times.front().what, "running max: 128 lines of 7 + 128 lines of 7");
  EXPECT_EQ(times[1].what, "forward: queries 8 x 7, keys 8 x 7, causal");
  EXPECT_EQ(times[2].what, "forward: queries 8 x 8, keys 8 x 8, causal, + summaries 8 x 8, others");
  EXPECT_EQ(times[3].what, "forward (merged): queries 8 x 8, keys 8 x 8, strict");
  EXPECT_EQ(times.back().what, "running max backward: 128 lines of 7 + 128 lines of 7");
  const auto count = [&](const std::string& prefix) {
    return std::count_if(
        times.begin(), times.end(), [&](const auto& t) { return t.what.rfind(prefix, 0) == 0; });
  };
  EXPECT_EQ(count("running max"), 3);
  const auto delta = std::find_if(
      times.begin(), times.end(), [](const auto& t) { return t.what.rfind("delta", 0) == 0; });
  ASSERT_GE(delta - times.begin(), 2);
  EXPECT_EQ((delta - 2)->what, times[0].what);
  EXPECT_EQ((delta - 1)->what, times[1].what);
  EXPECT_EQ(count("backward (dk dv, dq)"), 3);  // the row pass with its spans, column, local
}

// horizontal's four pools (prefix and suffix of k and of q): one launch forward (and again at the
// start of the backward); backward, two scans of one side add into the same gradient, so each
// launch holds one scan of each side: the two prefixes, then the two suffixes.
TEST(LaunchTimes, PoolsShareLaunchesButNotAGradient) {
  auto m = make_attention({"combiner-axial-horizontal", 8, 8, "max"}, 64, 8);
  m->set_path(AttentionImpl::Path::kFused);
  std::vector<fused_launch::LaunchTime> times;
  {
    fused_launch::LaunchTimes timer;
    forward_backward(*m, 64);
    times = timer.times();
  }
  std::vector<std::string> pools;
  for (const auto& t : times)
    if (t.what.rfind("running max", 0) == 0) pools.push_back(t.what);
  const std::string part = "112 lines of 8", reversed = part + ", reversed";
  ASSERT_EQ(pools.size(), 4u);
  EXPECT_EQ(pools[0], "running max: " + part + " + " + reversed + " + " + part + " + " + reversed);
  EXPECT_EQ(pools[1], pools[0]);
  EXPECT_EQ(pools[2], "running max backward: " + part + " + " + part);
  EXPECT_EQ(pools[3], "running max backward: " + reversed + " + " + reversed);
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
