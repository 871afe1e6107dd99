// A local pass that makes its cumulative max pools in its own tiles (FusedPass::pooled,
// FusedPool::on_chip; fused/kernel_plan.h pools_on_chip): vertical's pass down each column and
// horizontal's two along each row pool q and k there in the forward instead of running-max
// launches and a qs in memory, and their backward's kernels so too (past a segment's first tile,
// carried from its rows before the tile); where a column or row is one tile, their backward runs
// the pools' backward in its epilogue (Backward::pools_dq, pools_backward_on_chip). Held
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
#include "pooled_plans.h"

// A namespace of this file's own: its constants would meet another file's in a unity batch.
namespace combiner::attention::pooled_test {
namespace {

using pooled_plans::horizontal;
using pooled_plans::Plan;
using pooled_plans::vertical;

// Horizontal's passes over whole rows, pooled or not.
Plan whole_rows(int64_t L, int64_t W, bool on_chip) {
  return pooled_plans::horizontal_over(L, W, on_chip, W);
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
      q, k, v, {}, {}, plan.local, plan.joint, score_scale(D), plan.pools);
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
  struct Case {
    Plan (*plan)(int64_t, int64_t, bool);
    Shape shape;
    size_t fewer;  // launches: the pools' forward, and per summary group their making again,
                   // qs's once more and, where a segment is one tile, their backward
  };
  const std::vector<Case> cases = {
      {vertical, {328, 8, 32, torch::kFloat}, 4},      // columns of 40 rows: one to a tile
      {vertical, {126, 6, 32, torch::kFloat}, 4},      // columns of 20: three to a tile
      {vertical, {150, 24, 64, torch::kBFloat16}, 4},  // a short last row (no span of its own)
      {vertical, {328, 8, 128, torch::kBFloat16}, 4},  // D 128: the backward walks 32 at a time
      {vertical, {126, 6, 128, torch::kBFloat16}, 4},  // packed, a column across two walk tiles
      {vertical, {126, 6, 16, torch::kDouble}, 4},
      {vertical, {12, 1, 8, torch::kFloat}, 1},  // one column: no span, no gradient through it
      // Columns of 70 rows: two tiles, pooled in the forward, made again so in backward and
      // pooled so by the backward's kernels (no qs made a third time), the pools' backward the
      // scans'. So too float32 at D 128, whose backward is two kernels.
      {vertical, {568, 8, 32, torch::kFloat}, 3},
      {vertical, {568, 8, 64, torch::kBFloat16}, 3},
      {vertical, {328, 8, 128, torch::kFloat}, 3},
      {horizontal, {288, 96, 64, torch::kBFloat16}, 5},  // rows of 96, two tiles
      {horizontal, {450, 150, 32, torch::kFloat}, 5},    // rows of 150, three
      // Rows of 48 in float32 at D 128: one tile, its backward two kernels, over whole rows
      // (fused_axial.cpp), whose queries' gradient they store for the scans.
      {whole_rows, {384, 48, 128, torch::kFloat}, 5},
      {horizontal, {150, 24, 64, torch::kBFloat16}, 7},  // rows of 24: two to a tile
      {horizontal, {392, 48, 32, torch::kFloat}, 7},     // rows of 48, the last short
      {horizontal, {200, 40, 128, torch::kBFloat16}, 7},
      {horizontal, {96, 12, 16, torch::kDouble}, 7}};
  const auto expect_equal = [](const auto& a, const auto& b, const std::string& what) {
    EXPECT_TRUE(torch::equal(a.o, b.o)) << what;
    EXPECT_TRUE(torch::equal(a.dq, b.dq)) << what;
    EXPECT_TRUE(torch::equal(a.dk, b.dk)) << what;
    EXPECT_TRUE(torch::equal(a.dv, b.dv)) << what;
  };
  for (const auto& c : cases) {
    const auto& s = c.shape;
    const auto on_chip = c.plan(s.L, s.W, true);
    for (const auto& local : on_chip.local)
      ASSERT_TRUE(pools_fit_on_chip(local, torch::empty({1, 1, s.L, s.D}, s.dtype))) << name(s);
    const auto a = run(on_chip, s.L, s.D, s.dtype);
    const auto b = run(c.plan(s.L, s.W, false), s.L, s.D, s.dtype);
    expect_equal(a, b, name(s));
    EXPECT_GT(a.dq.abs().sum().item<double>(), 0) << name(s);
    EXPECT_EQ(b.launches.size() - a.launches.size(), c.fewer) << name(s);
    if (c.plan != horizontal || s.W - 1 > fused::kQueryTile) continue;
    // Horizontal's pooled passes run over the W - 1 columns of each row whose summaries are
    // read, the scans' plan over whole rows: the same again with the scans over W - 1 columns
    // (on a GPU a packed tile of other segment lengths sums in another order: only this pair
    // is the same bits there, tests/emulated/pooled_test.cpp).
    expect_equal(a,
                 run(pooled_plans::horizontal_over(s.L, s.W, false, s.W - 1), s.L, s.D, s.dtype),
                 name(s) + ", the scans over W - 1 columns");
  }
}

// What it saves, counted from the plans (fused/traffic.h): the pool launch read k's and q's
// pooled rows and wrote ks and qs; the pooled pass writes ks and reads q where it read qs. So
// each of the forward's pool launch and its remaking in backward gives back three slot-sized
// tensors, and qs made once more two. The pools' backward read k, q and the slots' gradients and
// added into dk and dq (eight); in the local pass's epilogue it reads ks's gradient and adds into
// dq, where the pass stored qs's gradient before (two): six more, fourteen in all.
TEST(PooledPass, MovesFourteenSlotsFewer) {
  const int64_t L = 392, W = 48, D = 32, spans = (L + W - 1) / W - 1;
  const auto bytes = [&](Plan (*plan)(int64_t, int64_t, bool), bool on_chip) {
    double unique = 0;
    for (const auto& t : run(plan(L, W, on_chip), L, D, torch::kFloat).launches)
      unique += t.bytes.unique;
    return unique;
  };
  const double slot = 2.0 * 2 * spans * W * D * 4;  // B x H x rows x D floats
  EXPECT_DOUBLE_EQ(bytes(vertical, false) - bytes(vertical, true), 14 * slot);
  // Horizontal: the same for each of its prefix and suffix summaries, its forward's pool launch
  // making both at once; and four more where its row pass and its prefix pass run in one launch
  // each way (fused::ForwardPair, BackwardPair): the pooled prefix pass reads q's rows that the
  // row pass has just read (forward and backward) and adds into the dq rows it has just read and
  // written (backward), where the scans' plan reads qs and stores qs's gradient.
  // (Horizontal's passes over whole rows on chip, as the scans' plan runs them.)
  double whole_rows = 0;
  for (const auto& t :
       run(pooled_plans::horizontal_over(L, W, true, W), L, D, torch::kFloat).launches)
    whole_rows += t.bytes.unique;
  EXPECT_DOUBLE_EQ(bytes(horizontal, false) - whole_rows, 32 * slot);
  // Its passes over the W - 1 columns of each row whose summaries are read rather than all W:
  // per span row, a row of each tensor the passes read or write for that column, fewer. The
  // forward's prefix pass writes u and ks (q, k and v rows the row pass in its launch reads);
  // the suffix pass and the two passes made again in backward read q, k, v and write u and ks;
  // the backward's prefix pass reads u's and ks's gradients; the suffix pass reads q, k, v and
  // those two and adds into dq, dk and dv (each read and written): 30 rows; and 8 floats, u's
  // lse written by each of the four forwards and read with u's delta by each of the backwards.
  const double row = 2.0 * 2 * D * 4, lse = 2.0 * 2 * 4;
  EXPECT_DOUBLE_EQ(whole_rows - bytes(horizontal, true), spans * (30 * row + 8 * lse));
}

// The variants' local passes make their pools in their tiles, forward and backward (no scan
// launch, no qs), and where each column (vertical) or row (horizontal) is one tile, take their
// backward too; else the scan kernel does, one launch per summary group: columns of 70 rows,
// rows of 96, or float32 at D 128 (whose backward is not one CTA per segment). Counted: the
// pooled passes' launches in the forward, and the scan launches forward and backward.
TEST(PooledPass, TheVariantsPoolInTheirTilesAndTakeTheirBackwardWhereASegmentIsOneTile) {
  const auto launches =
      [](const std::string& variant, int64_t L, int64_t W, int64_t D, torch::ScalarType dtype) {
        auto m = make_attention({variant, W, W, "max"}, L, D);
        m->set_path(AttentionImpl::Path::kFused);
        const auto draw = [&] { return torch::randn({1, 1, L, D}).to(dtype).requires_grad_(); };
        const auto q = draw(), k = draw(), v = draw();
        fused_launch::LaunchTimes timer;
        const auto o = m->forward(q, k, v);
        int pooled = 0, scans = 0;
        for (const auto& t : timer.times())
          pooled += t.what.find("running max pools in its tiles") != std::string::npos;
        torch::autograd::grad({o}, {q, k, v}, {torch::ones_like(o)});
        for (const auto& t : timer.times()) scans += t.what.rfind("running max", 0) == 0;
        return std::make_pair(pooled, scans);
      };
  const std::string vertical = "combiner-axial-vertical", horizontal = "combiner-axial-horizontal";
  EXPECT_EQ(launches(vertical, 3072, 48, 64, torch::kBFloat16), std::make_pair(1, 0));
  EXPECT_EQ(launches(vertical, 568, 8, 32, torch::kFloat), std::make_pair(1, 1));
  EXPECT_EQ(launches(vertical, 328, 8, 128, torch::kFloat), std::make_pair(1, 1));
  EXPECT_EQ(launches(horizontal, 3072, 48, 64, torch::kBFloat16), std::make_pair(2, 0));
  EXPECT_EQ(launches(horizontal, 3072, 96, 64, torch::kBFloat16), std::make_pair(2, 2));
  EXPECT_EQ(launches(horizontal, 384, 48, 128, torch::kFloat), std::make_pair(2, 2));
}

TEST(PooledPass, PlansThatCannotPoolOnChipGiveOneLineErrors) {
  const int64_t W = 8, D = 32;
  const auto expect_error = [&](int64_t L, const Plan& plan, const std::string& says) {
    const auto q = torch::randn({1, 1, L, D}), k = torch::randn({1, 1, L, D}),
               v = torch::randn({1, 1, L, D});
    try {
      fused_attention_with_local(q, k, v, {}, {}, plan.local, plan.joint, 1.0, plan.pools);
      ADD_FAILURE() << "no error; expected: " << says;
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      EXPECT_NE(what.find(says), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  // Queries not the running max of their own keys' rows: the keys' successors.
  auto shifted = vertical(136, W, true);
  shifted.local[0].pooled_query.first += 1;
  expect_error(136, shifted, "its queries pooled from its keys' rows");
  auto strict = vertical(136, W, true);  // a query that does not see its own key
  strict.local[0].mask = fused::Mask::kStrict;
  expect_error(136, strict, "masked causal or none");
  auto half = vertical(136, W, true);  // columns of 16 rows: one tile
  half.pools[1].on_chip = false;
  expect_error(136, half, "needs a running max pool made on chip of q");
  auto reversed = vertical(136, W, true);
  reversed.pools[0].reverse = true;
  expect_error(136, reversed, "needs a running max pool made on chip of k");
}

}  // namespace
}  // namespace combiner::attention::pooled_test
