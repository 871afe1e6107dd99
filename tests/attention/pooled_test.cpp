// A local pass that makes its cumulative max pools in its own tiles (FusedPass::pooled,
// FusedPool::on_chip; fused/kernel.h pools_on_chip): vertical's pass down each column, where a
// column is one tile, pools q and k there instead of two running-max launches and a qs in
// memory, and its backward runs the pools' backward in its epilogue (Backward::pools_dq). Held
// to the same call with the pools made and taken back by the scan kernels: o and the gradients
// of q, k and v equal to the bit, in float32, bfloat16 and float64, unpacked and packed columns,
// D 128's backward walk of two query tiles (its running max carried from one to the next); then
// what it saves in launches and bytes, and the plans it refuses.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/fused.h"
#include "attention/fused/launch.h"
#include "attention/span_ops.h"

// A namespace of this file's own: its constants would meet another file's in a unity batch.
namespace combiner::attention::pooled_test {
namespace {

struct Plan {
  std::vector<FusedPool> pools;
  FusedPass local;
  std::vector<FusedPass> joint;
};

// Vertical's plan at L, W (fused_axial.cpp), its pools made by the kernels or on chip.
Plan vertical(int64_t L, int64_t W, bool on_chip) {
  const int64_t spans = (L + W - 1) / W - 1;
  Plan p;
  p.pools = {FusedPool::running_max(false, spans, W, 2, false, 0),
             FusedPool::running_max(true, spans, W, 2, false, 0)};
  p.local.query = p.local.key = p.local.value = {W, spans, 1, W, spans * W};
  p.local.mask = fused::Mask::kCausal;
  p.local.pooled = on_chip;
  for (auto& pool : p.pools) pool.on_chip = on_chip;
  p.joint = vertical_joint_passes(L, W);
  return p;
}

struct Run {
  torch::Tensor o, dq, dk, dv;
  std::vector<fused_launch::LaunchTime> launches;
};

// One forward and backward of `plan` over q, k, v drawn in `dtype`, as strided views of one
// packed projection (as the model makes them).
Run run(const Plan& plan, int64_t L, int64_t D, torch::ScalarType dtype) {
  torch::manual_seed(13);
  const int64_t B = 2, H = 2;
  auto projection = torch::randn({B, L, 3 * H * D}).to(dtype).requires_grad_();
  const auto g = torch::randn({B, H, L, D}).to(dtype);
  const auto qkv = projection.view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
  const auto q = qkv[0], k = qkv[1], v = qkv[2];
  Run r;
  fused_launch::LaunchTimes timer;
  r.o = fused_attention_with_local(
      q, k, v, {}, {}, {plan.local}, plan.joint, score_scale(D), plan.pools);
  const auto d = torch::autograd::grad({r.o}, {projection}, {g})[0].view({B, L, 3, H, D});
  r.dq = d.select(2, 0);
  r.dk = d.select(2, 1);
  r.dv = d.select(2, 2);
  r.launches = timer.times();
  return r;
}

struct Shape {
  int64_t L, W, D;
  torch::ScalarType dtype;
};

std::string name(const Shape& s) {
  return "L " + std::to_string(s.L) + " W " + std::to_string(s.W) + " D " + std::to_string(s.D) +
         " " + c10::toString(s.dtype);
}

TEST(PooledPass, IsThePoolKernelsBitForBit) {
  const std::vector<Shape> shapes = {
      {328, 8, 32, torch::kFloat},      // columns of 40 rows: one to a tile
      {126, 6, 32, torch::kFloat},      // columns of 20: three to a tile
      {150, 24, 64, torch::kBFloat16},  // a short last row (no span of its own)
      {328, 8, 128, torch::kBFloat16},  // D 128: the backward walks 32 queries at a time
      {126, 6, 128, torch::kBFloat16},  // packed, a column across the walk's two tiles
      {126, 6, 16, torch::kDouble},
      {12, 1, 8, torch::kFloat}};  // one column
  for (const auto& s : shapes) {
    const auto on_chip = vertical(s.L, s.W, true);
    ASSERT_TRUE(pools_fit_on_chip(on_chip.local, torch::empty({1, 1, s.L, s.D}, s.dtype)))
        << name(s);
    const auto a = run(on_chip, s.L, s.D, s.dtype);
    const auto b = run(vertical(s.L, s.W, false), s.L, s.D, s.dtype);
    EXPECT_TRUE(torch::equal(a.o, b.o)) << name(s);
    EXPECT_TRUE(torch::equal(a.dq, b.dq)) << name(s);
    EXPECT_TRUE(torch::equal(a.dk, b.dk)) << name(s);
    EXPECT_TRUE(torch::equal(a.dv, b.dv)) << name(s);
    EXPECT_GT(a.dq.abs().sum().item<double>(), 0) << name(s);
    // The pools' forward (one launch), their remaking in backward, qs's once more and their
    // backward: gone. (One column sees no spans: nothing reads the summaries, and the backward
    // makes none again and takes no gradient through them.)
    EXPECT_EQ(b.launches.size() - a.launches.size(), s.W > 1 ? 4u : 1u) << name(s);
  }
}

// What it saves, counted from the plans (fused/traffic.h): the pool launch read k's and q's
// pooled rows and wrote ks and qs; the pooled pass writes ks and reads q where it read qs. So
// each of the forward's pool launch and its remaking in backward gives back three slot-sized
// tensors, and qs made once more two. The pools' backward read k, q and the slots' gradients and
// added into dk and dq (eight); in the local pass's epilogue it reads ks's gradient and adds into
// dq, where the pass stored qs's gradient before (two): six more, fourteen in all.
TEST(PooledPass, MovesFourteenSlotsFewer) {
  const int64_t L = 328, W = 8, D = 32, spans = L / W - 1;
  const auto bytes = [&](bool on_chip) {
    double unique = 0;
    for (const auto& t : run(vertical(L, W, on_chip), L, D, torch::kFloat).launches)
      unique += t.bytes.unique;
    return unique;
  };
  const double slot = 2.0 * 2 * spans * W * D * 4;  // B x H x rows x D floats
  EXPECT_DOUBLE_EQ(bytes(false) - bytes(true), 14 * slot);
}

// The variant takes the pooled pass where each column is one tile, and the kernels' pools where
// it is not: columns of 70 rows, or float32 at D 128 (whose backward is not one CTA per column).
TEST(PooledPass, VerticalPoolsOnChipWhereAColumnIsOneTile) {
  const auto pooled_launches = [](int64_t L, int64_t W, int64_t D, torch::ScalarType dtype) {
    auto m = make_attention({"combiner-axial-vertical", W, W, "max"}, L, D);
    m->set_path(AttentionImpl::Path::kFused);
    auto q = torch::randn({1, 1, L, D}).to(dtype), k = torch::randn({1, 1, L, D}).to(dtype);
    auto v = torch::randn({1, 1, L, D}).to(dtype);
    fused_launch::LaunchTimes timer;
    m->forward(q, k, v);
    int pooled = 0, scans = 0;
    for (const auto& t : timer.times()) {
      pooled += t.what.find("running max pools in its tiles") != std::string::npos;
      scans += t.what.rfind("running max", 0) == 0;
    }
    return std::make_pair(pooled, scans);
  };
  EXPECT_EQ(pooled_launches(3072, 48, 64, torch::kBFloat16), std::make_pair(1, 0));
  EXPECT_EQ(pooled_launches(568, 8, 32, torch::kFloat), std::make_pair(0, 1));  // 70 rows
  EXPECT_EQ(pooled_launches(328, 8, 128, torch::kFloat), std::make_pair(0, 1));
}

TEST(PooledPass, PlansThatCannotPoolOnChipGiveOneLineErrors) {
  const int64_t W = 8, D = 32;
  const auto expect_error = [&](int64_t L, const Plan& plan, const std::string& says) {
    const auto q = torch::randn({1, 1, L, D}), k = torch::randn({1, 1, L, D}),
               v = torch::randn({1, 1, L, D});
    try {
      fused_attention_with_local(q, k, v, {}, {}, {plan.local}, plan.joint, 1.0, plan.pools);
      ADD_FAILURE() << "no error; expected: " << says;
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  // Columns of 70 rows: two tiles each.
  expect_error(568, vertical(568, W, true), "one query tile and one key tile per segment");
  auto half = vertical(136, W, true);  // columns of 16 rows: one tile
  half.pools[1].on_chip = false;
  expect_error(136, half, "one pool of k and one of q");
  auto reversed = vertical(136, W, true);
  reversed.pools[0].reverse = true;
  expect_error(136, reversed, "a running max down dim 2");
}

}  // namespace
}  // namespace combiner::attention::pooled_test
