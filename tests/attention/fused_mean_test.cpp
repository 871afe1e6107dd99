// The mean of two fused calls in one autograd node (attention/fused/nodes.cpp: combiner-mixture's
// fused path): the mean of the two calls as two nodes, to rounding, with one set of the gradients
// of q, k and v (the second call adds into the first's) and no sums of outputs or gradients
// (the launches: tests/tools/launch_count_test.cpp). The second call's last pass stores the mean
// where it writes every row of o (fused::Forward::mean_with), else an average launch does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/fused.h"
#include "attention/summary.h"
#include "pooled_plans.h"
#include "util/device.h"

// A namespace of this file's own: its constants would meet another file's in a unity batch.
namespace combiner::attention::fused_mean_test {
namespace {

constexpr int64_t kB = 2, kH = 2, kD = 8;

struct Run {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
  int64_t peak = 0;               // bytes alive at most in the forward and backward, less before
  std::string node;               // the output's node
  std::vector<std::string> next;  // the nodes it passes gradients to
};

// vertical's and horizontal's fused calls over rows of W: their mean as one node ("one node"),
// or as two nodes and an average ("two nodes": the glue combiner-mixture ran before); or
// vertical's alone ("vertical").
Run run(int64_t L, int64_t W, torch::ScalarType dtype, const std::string& what) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i)
    in.push_back(torch::randn({kB, kH, L, kD}).to(dtype).requires_grad_());
  const auto d_o = torch::randn({kB, kH, L, kD}).to(dtype);
  torch::nn::Module owner;
  const SpanSummary summary(owner, "max", kD, /*with_query=*/true);
  const torch::Device cpu(torch::kCPU);
  util::reset_peak_memory(cpu);
  const double before = util::device_allocated_mib(cpu);
  Run r;
  if (what == "one node")
    r.out = fused_combiner_mixture(in[0], in[1], in[2], summary, W);
  else if (what == "two nodes")
    r.out = 0.5 * (fused_combiner_vertical(in[0], in[1], in[2], summary, W) +
                   fused_combiner_horizontal(in[0], in[1], in[2], summary, W));
  else
    r.out = fused_combiner_vertical(in[0], in[1], in[2], summary, W);
  r.node = r.out.grad_fn()->name();
  for (const auto& edge : r.out.grad_fn()->next_edges())
    r.next.push_back(edge.function ? edge.function->name() : "");
  r.out.backward(d_o);
  r.peak = std::llround((util::device_peak_mib(cpu) - before) * 1024 * 1024);
  for (auto& x : in) r.grads.push_back(x.grad());
  return r;
}

// Rows of 8 (one tile: the pools' backward in the passes' epilogues) and of 72 (two: the pool
// kernels take it, adding into the gradients so far), a short last row.
TEST(FusedMean, IsTheMeanOfTwoNodesToRounding) {
  util::count_cpu_tensor_bytes();
  for (const auto& [L, W] : std::vector<std::pair<int64_t, int64_t>>{{60, 8}, {200, 72}}) {
    for (const auto& [dtype, tol] : std::vector<std::pair<torch::ScalarType, double>>{
             {torch::kDouble, 1e-13}, {torch::kFloat, 2e-6}, {torch::kBFloat16, 0.07}}) {
      const auto one = run(L, W, dtype, "one node"), two = run(L, W, dtype, "two nodes");
      const std::string at =
          "L " + std::to_string(L) + " W " + std::to_string(W) + " " + c10::toString(dtype);
      // One node, passing its gradients of q, k and v to the inputs themselves: no sums.
      EXPECT_NE(one.node.find("MeanFunction"), std::string::npos) << one.node;
      ASSERT_GE(one.next.size(), 3u);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(one.next[i], "torch::autograd::AccumulateGrad") << at << ": input " << i;
      EXPECT_LT((one.out - two.out).abs().max().item<double>(), tol) << at;
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(one.grads[i].scalar_type(), dtype) << at;
        EXPECT_LT((one.grads[i] - two.grads[i]).abs().max().item<double>(), tol)
            << at << ": input " << i;
      }
      // Fewer bytes alive at the peak: the second call's gradients are the first's.
      EXPECT_LT(one.peak, two.peak) << at;
      std::printf("%s: peak %lld bytes in one node, %lld in two\n",
                  at.c_str(),
                  static_cast<long long>(one.peak),
                  static_cast<long long>(two.peak));
    }
  }
}

// Any two calls. One here reads k's first 8 rows in each of its 4 segments of 8 queries (as
// rowmajor's column pass reads the row summaries: no row of dk written once), its values each
// segment's own: its dk is a float buffer of slabs summed, added into the gradient so far at the
// end, where its dq and dv are added into in place. The other is one causal segment over every
// row. Both orders, against the two calls as two nodes.
TEST(FusedMean, AddsASecondCallsBufferIntoTheFirstsGradients) {
  const int64_t L = 32;
  FusedCall causal, shared;
  causal.passes.resize(1);
  causal.passes[0].query = causal.passes[0].key = causal.passes[0].value = {1, L, L, 1, L};
  causal.passes[0].mask = fused::Mask::kCausal;
  shared.passes.resize(1);
  shared.passes[0].query = {4, 8, 8, 1, L};
  shared.passes[0].key = {4, 8, 0, 1, L};
  shared.passes[0].value = {4, 8, 8, 1, L};
  shared.passes[0].mask = fused::Mask::kNone;
  causal.scale = shared.scale = 0.25;
  for (const auto& [dtype, tol] : std::vector<std::pair<torch::ScalarType, double>>{
           {torch::kDouble, 1e-13}, {torch::kBFloat16, 0.05}}) {
    for (const bool shared_first : {false, true}) {
      const auto& a = shared_first ? shared : causal;
      const auto& b = shared_first ? causal : shared;
      torch::manual_seed(9);
      std::vector<torch::Tensor> in;
      for (int i = 0; i < 3; ++i)
        in.push_back(torch::randn({kB, kH, L, kD}).to(dtype).requires_grad_());
      const auto d_o = torch::randn({kB, kH, L, kD}).to(dtype);
      const auto grads = [&](const torch::Tensor& out) {
        return torch::autograd::grad({out}, {in[0], in[1], in[2]}, {d_o});
      };
      const auto one = fused_mean(in[0], in[1], in[2], a, b);
      const auto two =
          0.5 * (fused_call(in[0], in[1], in[2], a) + fused_call(in[0], in[1], in[2], b));
      const std::string at =
          std::string(c10::toString(dtype)) + (shared_first ? ", shared first" : "");
      EXPECT_LT((one - two).abs().max().item<double>(), tol) << at;
      const auto g1 = grads(one), g2 = grads(two);
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(g1[i].scalar_type(), dtype) << at;
        EXPECT_GT(g1[i].abs().sum().item<double>(), 0) << at << ": input " << i;
        EXPECT_LT((g1[i] - g2[i]).abs().max().item<double>(), tol) << at << ": input " << i;
      }
    }
  }
}

// Where the second call's last pass to run writes only some rows of o, it cannot store the mean:
// the average runs after the call, and the second call's backward makes its delta from its own o.
// Here horizontal's plan with its row pass last and a pass over the first half of the rows before
// it; the row pass runs first, in its local passes' launch (paired), so the half pass runs last.
// Against two nodes, with vertical's plan first (an o that differs from the second's in every
// row).
TEST(FusedMean, ASecondCallWhoseLastPassWritesSomeRowsIsAveragedAfter) {
  const int64_t L = 200, W = 40;
  const auto plan = pooled_plans::horizontal(L, W, true),
             first = pooled_plans::vertical(L, W, true);
  ASSERT_EQ(plan.joint.size(), 3u);  // the row pass, the suffixes', the column pass
  FusedCall a, b;
  a.passes = first.joint;
  a.local = first.local;
  a.pools = first.pools;
  b.local = plan.local;
  b.pools = plan.pools;
  FusedPass half;
  half.query = half.key = half.value = {1, L / 2, 0, 1, L};
  half.mask = fused::Mask::kCausal;
  b.passes = {plan.joint[2], plan.joint[1], half, plan.joint[0]};
  a.scale = b.scale = 1 / std::sqrt(double(kD));
  torch::manual_seed(11);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i) in.push_back(torch::randn({kB, kH, L, kD}).requires_grad_());
  const auto d_o = torch::randn({kB, kH, L, kD});
  const auto one = fused_mean(in[0], in[1], in[2], a, b);
  const auto two = 0.5 * (fused_call(in[0], in[1], in[2], a) + fused_call(in[0], in[1], in[2], b));
  EXPECT_LT((one - two).abs().max().item<double>(), 2e-6);
  const auto g1 = torch::autograd::grad({one}, {in[0], in[1], in[2]}, {d_o});
  const auto g2 = torch::autograd::grad({two}, {in[0], in[1], in[2]}, {d_o});
  for (int i = 0; i < 3; ++i)
    EXPECT_LT((g1[i] - g2[i]).abs().max().item<double>(), 2e-6) << "input " << i;
}

// The first call's o is the node's own: its backward lets go of it as soon as its delta is made,
// before the summaries' gradients are (BackwardOptions::o_alone). At its peak the mean holds what
// vertical's call alone holds (its o there is the node's output) and the first call's delta, a
// float per row, kept for the second's; an o more before. (At whole rows of one tile, as here at
// L 96, vertical's first joint pass could make the delta; it is made by the local passes remade
// before it instead.)
TEST(FusedMean, HoldsAtItsPeakOneCallsBytesAndADelta) {
  util::count_cpu_tensor_bytes();
  for (const auto& [L, W] : std::vector<std::pair<int64_t, int64_t>>{{96, 8}, {60, 8}, {200, 72}}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto mean = run(L, W, dtype, "one node"), alone = run(L, W, dtype, "vertical");
      const int64_t delta = kB * kH * L * int64_t(sizeof(float));
      EXPECT_LE(mean.peak, alone.peak + delta)
          << "L " << L << " W " << W << " " << c10::toString(dtype) << ": vertical alone "
          << alone.peak << " bytes";
    }
  }
}

// A graph kept for another backward (retain_graph) keeps the first call's o: each backward gives
// the same gradients.
TEST(FusedMean, AGraphKeptRunsBackwardAgain) {
  const int64_t L = 60, W = 8;
  torch::manual_seed(3);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i) in.push_back(torch::randn({kB, kH, L, kD}).requires_grad_());
  const auto d_o = torch::randn({kB, kH, L, kD});
  torch::nn::Module owner;
  const SpanSummary summary(owner, "max", kD, /*with_query=*/true);
  const auto out = fused_combiner_mixture(in[0], in[1], in[2], summary, W);
  const auto first = torch::autograd::grad({out}, {in[0], in[1], in[2]}, {d_o}, true);
  const auto second = torch::autograd::grad({out}, {in[0], in[1], in[2]}, {d_o}, true);
  const auto last = torch::autograd::grad({out}, {in[0], in[1], in[2]}, {d_o});
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(first[i].abs().sum().item<double>(), 0) << "input " << i;
    EXPECT_TRUE(torch::equal(first[i], second[i])) << "input " << i;
    EXPECT_TRUE(torch::equal(first[i], last[i])) << "input " << i;
  }
}

TEST(FusedMean, CallsOfTwoScalesAreAnError) {
  const auto q = torch::randn({1, 1, 16, kD});
  FusedCall a, b;
  a.passes = b.passes = vertical_joint_passes(16, 16);
  a.scale = 0.5;
  b.scale = 0.25;
  try {
    fused_mean(q, q, q, a, b);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("one score scale, got 0.5 and 0.25"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace combiner::attention::fused_mean_test
