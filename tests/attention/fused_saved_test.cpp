// What a fused call keeps for its backward (attention/fused/function.cpp): the cumulative pools
// (vertical's, as many rows as k and q) and the local expectations u made from them are made
// again in backward rather than kept; the plain segment maxes (one row per block) and the u they
// feed are kept. Counted in bytes on the CPU allocator, as
// `combiner-bench train --memory tensors` counts a model's, with the gradients checked against
// the composed path's so that making them again changes no result.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "util/device.h"

// A namespace of this file's own: its kB, kH and kD would meet another file's in a unity batch.
namespace combiner::attention::fused_saved_test {
namespace {

constexpr int64_t kB = 1, kH = 2, kD = 8;

struct Kept {
  int64_t bytes = 0;  // alive after the forward, less the inputs
  int64_t peak = 0;   // the most alive in the forward and backward, less the inputs and d_o
  std::vector<torch::Tensor> grads;
};

Kept forward_backward(const std::string& variant, int64_t L, int64_t W, AttentionImpl::Path path) {
  auto m = make_attention({variant, W, W, "max"}, L, kD);
  m->set_path(path);
  torch::manual_seed(3);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i) in.push_back(torch::randn({kB, kH, L, kD}).requires_grad_());
  const auto d_o = torch::ones({kB, kH, L, kD});
  const torch::Device cpu(torch::kCPU);
  util::reset_peak_memory(cpu);
  const double before = util::device_allocated_mib(cpu);
  const auto bytes = [&](double mib) { return std::llround((mib - before) * 1024 * 1024); };
  auto out = m->forward(in[0], in[1], in[2]);
  Kept kept;
  kept.bytes = bytes(util::device_allocated_mib(cpu));
  out.backward(d_o);
  kept.peak = bytes(util::device_peak_mib(cpu));
  for (auto& x : in) kept.grads.push_back(x.grad());
  return kept;
}

TEST(FusedSaved, CumulativePoolsAndTheirSummariesAreMadeAgainNotKept) {
  util::count_cpu_tensor_bytes();
  const int64_t L = 64, W = 8, rows = (L / W - 1) * W;  // ks, qs, u: the rows above the last
  const auto fused = forward_backward("combiner-axial-vertical", L, W, AttentionImpl::Path::kFused);
  // o and lse of the queries, as flash keeps: nothing of ks's, qs's or u's size.
  const int64_t floats = kB * kH * (L * kD + L);
  EXPECT_EQ(fused.bytes, floats * 4)
      << "ks, qs and u are " << 3 * kB * kH * rows * kD * 4 << " bytes more";
  const auto composed =
      forward_backward("combiner-axial-vertical", L, W, AttentionImpl::Path::kComposed);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(torch::allclose(fused.grads[i], composed.grads[i], 1e-5, 1e-5)) << "input " << i;
}

// The backward makes the slots again a summary group at a time (attention/fused/backward.cpp):
// vertical's ks, qs and u are one group of `rows` rows; horizontal's hold its prefix and its suffix
// summaries, two groups of `rows` rows each. At most four slot-sized tensors of one group are
// alive at once, beside o, lse, delta, dq, dk and dv: ks, u and their gradients, with u's lse
// and delta (made by the joint pass that stores u's gradient), while the joint passes run. qs
// exists only in the local passes' tiles (each column or row one
// tile: pooled on chip; at rows of 72 u, qs and the two gradients are alive with u's lse and
// delta, `rows` more floats), so once the joint passes are done three are alive.
TEST(FusedSaved, BackwardHoldsOneSummaryGroupAtATime) {
  util::count_cpu_tensor_bytes();
  const int64_t L = 64, W = 8, rows = (L / W - 1) * W;
  const int64_t around = kB * kH * (L * kD + 2 * L + 3 * L * kD);
  const std::vector<std::pair<const char*, int64_t>> peaks = {
      {"combiner-axial-vertical", around + kB * kH * (4 * rows * kD + 2 * rows)},
      {"combiner-axial-horizontal", around + kB * kH * (4 * rows * kD + 2 * rows)}};
  for (const auto& [variant, floats] : peaks) {
    const auto fused = forward_backward(variant, L, W, AttentionImpl::Path::kFused);
    EXPECT_EQ(fused.peak, floats * 4)
        << variant << ": a slot-sized tensor is " << kB * kH * rows * kD * 4 << " bytes";
  }
}

TEST(FusedSaved, SegmentMaxesAreKept) {
  util::count_cpu_tensor_bytes();
  const int64_t L = 64, s = 8, spans = L / s - 1;
  const auto fused = forward_backward("combiner-fixed", L, s, AttentionImpl::Path::kFused);
  // o and lse; ks and the pooled queries (a row per block but the last), u and its lse.
  const int64_t floats = kB * kH * (L * kD + L + 2 * spans * kD + spans * kD + spans);
  EXPECT_EQ(fused.bytes, floats * 4);
}

}  // namespace
}  // namespace combiner::attention::fused_saved_test
