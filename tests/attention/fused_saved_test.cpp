// What a fused call keeps for its backward (attention/fused/function.cpp): the cumulative pools
// (vertical's, as many rows as k and q) and the local expectations u made from them are made
// again in backward rather than kept; the plain segment maxes (one row per block) and the u they
// feed are kept. Counted in bytes on the CPU allocator, as
// `combiner-bench train --memory tensors` counts a model's, with the gradients checked against
// the composed path's so that making them again changes no result.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "util/device.h"

namespace combiner::attention {
namespace {

constexpr int64_t kB = 1, kH = 2, kD = 8;

struct Kept {
  int64_t bytes = 0;  // alive after the forward, less the inputs
  std::vector<torch::Tensor> grads;
};

Kept forward_backward(const std::string& variant, int64_t L, int64_t W, AttentionImpl::Path path) {
  auto m = make_attention({variant, W, W, "max"}, L, kD);
  m->set_path(path);
  torch::manual_seed(3);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i) in.push_back(torch::randn({kB, kH, L, kD}).requires_grad_());
  const torch::Device cpu(torch::kCPU);
  const double before = util::device_allocated_mib(cpu);
  auto out = m->forward(in[0], in[1], in[2]);
  Kept kept;
  kept.bytes = std::llround((util::device_allocated_mib(cpu) - before) * 1024 * 1024);
  out.backward(torch::ones_like(out));
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

TEST(FusedSaved, SegmentMaxesAreKept) {
  util::count_cpu_tensor_bytes();
  const int64_t L = 64, s = 8, spans = L / s - 1;
  const auto fused = forward_backward("combiner-fixed", L, s, AttentionImpl::Path::kFused);
  // o and lse; ks and the pooled queries (a row per block but the last), u and its lse.
  const int64_t floats = kB * kH * (L * kD + L + 2 * spans * kD + spans * kD + spans);
  EXPECT_EQ(fused.bytes, floats * 4);
}

}  // namespace
}  // namespace combiner::attention
