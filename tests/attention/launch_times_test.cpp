// fused_launch::LaunchTimes (attention/fused/launch.h): every call of the fused family while one
// lives, in order, with what it ran and the kernels it launches on a GPU; nothing recorded
// outside one, and the outer one back after an inner one ends.
#include <gtest/gtest.h>

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
  // The pools first (ks from k, then qs from q), then the local pass that makes u, then the
  // joint passes, then the backward of each and the pools' backward last.
  EXPECT_EQ(times.front().what.rfind("running max:", 0), 0u) << times.front().what;
  EXPECT_EQ(times[2].what, "forward: queries 8 x 7, keys 8 x 7, causal");
  EXPECT_EQ(times[3].what, "forward: queries 8 x 8, keys 8 x 8, causal, + summaries 8 x 8, others");
  EXPECT_EQ(times[4].what, "forward (merged): queries 8 x 8, keys 8 x 8, strict");
  EXPECT_EQ(times.back().what.rfind("running max backward:", 0), 0u) << times.back().what;
  const auto backward = std::count_if(times.begin(), times.end(), [](const auto& t) {
    return t.what.rfind("backward (dk dv, dq)", 0) == 0;
  });
  EXPECT_EQ(backward, 3);  // the row pass with its spans, the column and the local passes
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
