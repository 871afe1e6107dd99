// The backward's deltas made inside the passes (fused/kernel_pass.h Backward::summary_delta, u's,
// and Backward::made_delta, o's), on the CPU model: the delta kernel's to the bit, each row written
// once, the passes' gradients as without them; then the delta launches the fused call no longer
// makes, o's made by a forward's own CTAs included.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "attention/span_ops.h"
#include "delta_cases.h"
#include "pooled_plans.h"

namespace combiner::attention::deltas_test {
namespace {

using delta_cases::Case;

const delta_cases::Kernels kCpu = {&fused::forward_cpu, &fused::backward_cpu, &fused::delta_cpu};

TEST(PassDeltas, UsIsTheDeltaKernelsBitForBit) {
  const std::vector<Case> cases = {
      {false, 72, 8, 32, torch::kFloat},        // rows of 8, packed eight to a tile
      {false, 200, 40, 64, torch::kBFloat16},   // one CTA per row
      {false, 200, 40, 128, torch::kBFloat16},  // D 128: the dk/dv walk apart from dq
      {false, 216, 72, 64, torch::kBFloat16},   // 72 spans a row: two tiles of them
      {false, 90, 9, 16, torch::kDouble},
      {true, 200, 40, 64, torch::kBFloat16},  // u as source A
      {true, 96, 12, 32, torch::kFloat},      // packed
      {true, 200, 40, 128, torch::kBFloat16}};
  for (const auto& c : cases)
    EXPECT_EQ(delta_cases::check(c, kCpu, false), "") << delta_cases::name(c);
}

TEST(PassDeltas, OsIsTheDeltaKernelsBitForBit) {
  const std::vector<Case> cases = {
      {false, 200, 40, 64, torch::kBFloat16},  // columns of 5: packed
      {false, 1280, 20, 32, torch::kFloat},    // columns of 64: one tile each
      {true, 200, 40, 64, torch::kBFloat16},   // rows of 40
      {true, 200, 40, 128, torch::kBFloat16},  // D 128: two walk tiles a row
      {true, 96, 12, 16, torch::kDouble},      // packed
      // Made by the pass that reads the spans, which its second walk reads back:
      {false, 200, 40, 64, torch::kBFloat16, true},  // vertical's rows of 40
      {false, 72, 8, 32, torch::kFloat, true},       // rows of 8: packed
      {true, 200, 40, 64, torch::kBFloat16, true}};  // horizontal's columns of 5: packed
  for (const auto& c : cases)
    EXPECT_EQ(delta_cases::check(c, kCpu, true), "") << delta_cases::name(c);
}

// Gradients scaled where the pass writes them (Backward::grad_scale: the mixture's halves of d_o)
// are those of d_o scaled first, to the bit, stored in the pass dtype or added into Acc buffers;
// the deltas it makes are u's of the gradient as stored and o's of d_o as given.
TEST(PassDeltas, GradientsScaledInThePassAreThoseOfAScaledDo) {
  const std::vector<Case> cases = {
      {false, 72, 8, 32, torch::kFloat},        // packed
      {false, 200, 40, 64, torch::kBFloat16},   // one CTA per row
      {false, 200, 40, 128, torch::kBFloat16},  // D 128
      {true, 200, 40, 64, torch::kBFloat16},    // u as source A
      {true, 400, 100, 64, torch::kBFloat16},   // two key tiles a segment: walk and dq apart
      {true, 96, 12, 16, torch::kDouble},
      {false, 200, 40, 64, torch::kBFloat16, true}};
  for (const auto& c : cases)
    for (const bool made : {false, true})
      for (const auto kind : {fused::GradOut::kStore, fused::GradOut::kAtomic})
        EXPECT_EQ(delta_cases::check_grad_scale(c, kCpu, made, kind), "")
            << delta_cases::name(c) << (made ? ", o's delta" : ", u's delta")
            << (kind == fused::GradOut::kStore ? ", stored" : ", added");
}

// combiner-mixture's second call keeps the mean of the two calls' outputs for its o, stored by its
// last pass (Forward::mean_with), and makes its own delta from the mean and the first call's
// (Delta::other_delta): the delta kernel, the passes that make o's delta themselves (one CTA per
// segment, in the dk/dv walk) and a forward's CTAs alike, to the bit.
TEST(PassDeltas, OsDeltaOfAMeanIsMadeFromTheOtherCallsDelta) {
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16},
                                         {true, 96, 12, 16, torch::kDouble},
                                         {false, 1280, 20, 32, torch::kFloat}})
    EXPECT_EQ(delta_cases::check_own_delta(c, kCpu), "") << delta_cases::name(c);
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16, false, true},
                                         {true, 96, 12, 16, torch::kDouble, false, true},
                                         {false, 200, 40, 64, torch::kBFloat16, true, true}})
    EXPECT_EQ(delta_cases::check(c, kCpu, true), "") << delta_cases::name(c);
  EXPECT_EQ(
      delta_cases::check({true, 400, 100, 64, torch::kBFloat16, false, true}, kCpu, true, true),
      "");
  EXPECT_EQ(
      delta_cases::check_forward_delta({false, 200, 40, 64, torch::kBFloat16, false, true}, kCpu),
      "");
}

TEST(PassDeltas, APassStoresTheMeanOfItsOAndAnotherCalls) {
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16},
                                         {false, 72, 8, 32, torch::kFloat},
                                         {true, 200, 40, 32, torch::kFloat},
                                         {false, 90, 9, 16, torch::kDouble},
                                         {true, 96, 12, 16, torch::kDouble}})
    for (const bool merge : {false, true})
      EXPECT_EQ(delta_cases::check_mean_with(c, kCpu, merge), "")
          << delta_cases::name(c) << (merge ? ", merging" : "");
}

// o's delta made in the dk/dv walk of a pass of two key tiles a segment, the dq launch after it
// reading it (kernel_plan.h walk_makes_delta): every row by one CTA, the delta kernel's to the bit.
TEST(PassDeltas, ADkvWalkMakesOsDeltaAsTheDeltaKernel) {
  const std::vector<Case> cases = {
      {true, 400, 100, 64, torch::kBFloat16},  // horizontal's rows of 100: causal
      {false, 400, 4, 32, torch::kFloat},      // vertical's columns of 100 rows: strict
      {true, 300, 100, 16, torch::kDouble}};
  for (const auto& c : cases)
    EXPECT_EQ(delta_cases::check(c, kCpu, true, true), "") << delta_cases::name(c);
}

// In the call: o's delta made by its first backward pass (vertical's row pass, horizontal's
// column pass: one CTA per segment, every row once), u's by the passes that store u's gradient
// (vertical's row pass, horizontal's suffix pass and column pass; horizontal's prefix half, whose
// spans skip each row's last column, zero-fills its delta first): no delta launch.
TEST(PassDeltas, TheAxialCallsLaunchNoDelta) {
  const int64_t L = 392, W = 48, D = 32;
  for (const bool horizontal : {false, true}) {
    torch::manual_seed(3);
    const auto plan =
        horizontal ? pooled_plans::horizontal(L, W, true) : pooled_plans::vertical(L, W, true);
    auto q = torch::randn({1, 2, L, D}).requires_grad_(), k = torch::randn({1, 2, L, D}),
         v = torch::randn({1, 2, L, D});
    fused_launch::LaunchTimes timer;
    const auto o = fused_attention_with_local(
        q, k, v, {}, {}, plan.local, plan.joint, score_scale(D), plan.pools);
    o.sum().backward();
    int deltas = 0, made = 0, of_u = 0;
    for (const auto& t : timer.times()) {
      deltas += t.what.rfind("delta", 0) == 0;
      made += t.what.find(", making delta") != std::string::npos;
      of_u += t.what.find(", and u's delta") != std::string::npos;
    }
    const std::string name = horizontal ? "horizontal" : "vertical";
    EXPECT_EQ(deltas, 0) << name;
    EXPECT_EQ(made, 1) << name;
    EXPECT_EQ(of_u, horizontal ? 2 : 1) << name;
  }
}

// One fused call in float64 and its backward: the backward's launches, its gradients of q, k and
// v, and the composed path's.
struct FusedBackward {
  std::vector<fused_launch::LaunchTime> times;
  std::vector<torch::Tensor> grads, expected;

  FusedBackward(const AttentionOptions& options, std::vector<int64_t> shape, uint64_t seed) {
    const int64_t L = shape[2], D = shape[3];
    auto fused = make_attention(options, L, D), composed = make_attention(options, L, D);
    fused->set_path(AttentionImpl::Path::kFused);
    composed->set_path(AttentionImpl::Path::kComposed);
    torch::manual_seed(seed);
    const auto draw = [&] { return torch::randn(shape, torch::kDouble).requires_grad_(); };
    const auto q = draw(), k = draw(), v = draw();
    const auto g = torch::randn(shape, torch::kDouble);
    const auto o = fused->forward(q, k, v);
    {
      fused_launch::LaunchTimes timer;
      grads = torch::autograd::grad({o}, {q, k, v}, {g});
      times = timer.times();
    }
    expected = torch::autograd::grad({composed->forward(q, k, v)}, {q, k, v}, {g});
  }
  // The launches whose description starts with `start` and holds `text` and `also`.
  int count(const std::string& start, const std::string& text, const std::string& also = "") const {
    int n = 0;
    for (const auto& t : times)
      n += t.what.rfind(start, 0) == 0 && t.what.find(text) != std::string::npos &&
           t.what.find(also) != std::string::npos;
    return n;
  }
  void expect_the_composed_gradients() const {
    for (int i = 0; i < 3; ++i)
      EXPECT_LT((grads[i] - expected[i]).abs().max().item<double>(), 1e-10) << "input " << i;
  }
};

// combiner-fixed's u is its pooled queries' softmax over their own blocks, and its summaries are
// read by prefix, so no joint pass makes u's delta: its local pass, over every row of u, makes it
// as its query tile lands (Backward::made_delta), one CTA per block, or at blocks longer than a
// key tile in its dk/dv walk, where a delta launch over u and its gradient made it. o's delta: the
// joint pass reads its summaries by prefix, so runs no CTA a block; its dk/dv walk makes it
// (kernel_plan.h walk_makes_delta), where a delta launch made it. In float64 the call's gradients
// are the composed path's.
TEST(PassDeltas, FixedsPassesMakeOsAndUsDeltas) {
  for (const int64_t s : {24, 96}) {  // one key tile a block; two (CIFAR-10's blocks of 96)
    const FusedBackward run({"combiner-fixed", s, s, "max"}, {2, 3, 200 * s / 24, 16}, 6);
    EXPECT_EQ(run.count("delta", ""), 0) << s;
    EXPECT_EQ(run.count("backward", " x 1, keys", ", making delta"), 1) << s;  // u's
    EXPECT_EQ(run.count("backward", "summaries", ", making delta"), 1) << s;   // o's
    EXPECT_EQ(run.count("backward", " x 1, keys", "one CTA per segment"), s < 64 ? 1 : 0) << s;
    run.expect_the_composed_gradients();
  }
}

// At D 128 the dk/dv walk shares its launch with dq's CTAs (kernel_plan.h interleaved_backward),
// which would read rows of delta the walk is still writing: a delta launch makes o's.
TEST(PassDeltas, FixedAtD128LaunchesOsDelta) {
  const FusedBackward run({"combiner-fixed", 24, 24, "max"}, {1, 2, 200, 128}, 9);
  EXPECT_EQ(run.count("delta", ""), 1);
  EXPECT_EQ(run.count("backward", "summaries", ", making delta"), 0);
  run.expect_the_composed_gradients();
}

TEST(PassDeltas, AForwardMakesOsDeltaAsTheDeltaKernel) {
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16},
                                         {true, 200, 40, 32, torch::kFloat},
                                         {false, 72, 8, 16, torch::kDouble}})
    EXPECT_EQ(delta_cases::check_forward_delta(c, kCpu), "") << delta_cases::name(c);
}

// The 128-layer preset's layout (L 3072, rows of 96): vertical's row pass, first in the
// backward, is no one-CTA-per-segment pass (its rows are longer than a tile), so it cannot make
// o's delta, and its column pass runs last, in its local pass's launch. The backward's first
// launch remakes the local pass (its slots were not kept), and that launch makes o's delta, by
// CTAs of its own (Forward::delta): no delta launch. In float64 the call's gradients are the
// composed path's.
TEST(PassDeltas, TheRemadeLocalPassMakesOsDelta) {
  const int64_t W = 96;
  const FusedBackward run({"combiner-axial-vertical", W, W, "max"}, {1, 2, 32 * W, 16}, 7);
  ASSERT_FALSE(run.times.empty());
  EXPECT_EQ(run.count("delta", ""), 0);
  EXPECT_EQ(run.count("forward", ", and o's delta"), 1);
  EXPECT_NE(run.times.front().what.find(", and o's delta"), std::string::npos)
      << run.times.front().what;
  run.expect_the_composed_gradients();
}

// CIFAR-10's layout (L 3072, rows of 96): rowmajor's and horizontal's row pass, which reads no
// slot, is two query tiles a row, so cannot make o's delta; their column pass, one CTA per column
// over every row of o, can. It runs first and makes it, and the row pass runs after it: no delta
// launch. In float64 the call's gradients are the composed path's.
TEST(PassDeltas, TheColumnPassRunsFirstAndMakesOsDelta) {
  const int64_t W = 96;
  for (const std::string variant : {"combiner-axial-rowmajor", "combiner-axial-horizontal"}) {
    const FusedBackward run({variant, W, W, "max"}, {1, 2, 32 * W, 16}, 8);
    ASSERT_FALSE(run.times.empty()) << variant;
    EXPECT_EQ(run.count("delta", ""), 0) << variant;
    EXPECT_EQ(run.count("backward", ", making delta"), 1) << variant;
    // The first backward launch makes it; the row pass (32 rows of 96 queries) comes after.
    const auto launch = [&](const std::string& text) {
      return std::find_if(run.times.begin(),
                          run.times.end(),
                          [&](const auto& t) {
                            return t.what.rfind("backward", 0) == 0 &&
                                   t.what.find(text) != std::string::npos;
                          }) -
             run.times.begin();
    };
    const auto first = launch(""), row_pass = launch("queries 32 x 96");
    ASSERT_LT(row_pass, std::ptrdiff_t(run.times.size())) << variant;
    EXPECT_NE(run.times[first].what.find(", making delta"), std::string::npos)
        << variant << ": " << run.times[first].what;
    EXPECT_LT(first, row_pass) << variant;
    run.expect_the_composed_gradients();
  }
}

}  // namespace
}  // namespace combiner::attention::deltas_test
