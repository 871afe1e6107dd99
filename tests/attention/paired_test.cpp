// Two passes in one launch (fused/kernel_pass.h ForwardPair, BackwardPair), on the CPU model: which
// passes pair (same_ctas, pairable), and the fused calls with their pairs launched as one, against
// the same calls with each pair's passes launched in turn (pair_cases.h); a backward's walk and dq
// in one launch against the two.
#include <gtest/gtest.h>

#include <vector>

#include "attention/fused/function.h"
#include "pair_cases.h"
#include "pooled_plans.h"

namespace combiner::attention::paired_test {
namespace {

using pair_cases::Case;
using pair_cases::Variant;

// Joint pass `joint` and local pass `local` of a plan as the backward would run them; the local
// pass, where it pools on chip, with its pools' backward in its epilogue.
bool pair(const FusedPass& joint, const FusedPass& local, int64_t L, int64_t D) {
  const auto x = torch::empty({1, 2, L, D}, torch::kBFloat16);
  fused::Backward a, b;
  a.pass = fused_glue::make_pass(joint, x, x, x, x, x, 0.125);
  b.pass = fused_glue::make_pass(local, x, x, x, x, x, 0.125);
  if (local.pooled) b.pools_dq.kind = fused::GradOut::kStore;
  return fused::pairable(a, b);
}

FusedPass vertical_local(int64_t L, int64_t W) {
  return pooled_plans::vertical(L, W, /*on_chip=*/true).local[0];
}

TEST(Pairable, VerticalsColumnPassAndItsLocalPassAtL3072) {
  for (const int64_t W : {48, 96}) {  // columns of 64 rows and 63 spans; 32 and 31, two a tile
    const auto joint = vertical_joint_passes(3072, W);
    EXPECT_TRUE(pair(joint[1], vertical_local(3072, W), 3072, 64)) << "W " << W;
    // The row pass reads the spans: it does not pair.
    EXPECT_FALSE(pair(joint[0], vertical_local(3072, W), 3072, 64)) << "W " << W;
  }
  // At D 128 too (the 128-layer preset's heads), both column widths.
  for (const int64_t W : {48, 96})
    EXPECT_TRUE(pair(vertical_joint_passes(3072, W)[1], vertical_local(3072, W), 3072, 128))
        << "W " << W;
  // Columns of 128 rows are not one tile (L 12288): no pair.
  EXPECT_FALSE(pair(vertical_joint_passes(12288, 96)[1], vertical_local(12288, 96), 12288, 64));
  // Columns of 9 and spans of 8 pack seven and eight to a tile: different CTAs, no pair.
  EXPECT_FALSE(pair(vertical_joint_passes(392, 48)[1], vertical_local(392, 48), 392, 64));
}

TEST(Pairable, NotOverOtherRowsNorWhereAPassMakesADelta) {
  const int64_t L = 3072, W = 48;
  const auto row = horizontal_joint_passes(L, W)[0];
  const auto local = pooled_plans::horizontal(L, W, /*on_chip=*/false).local;
  const auto &prefix = local[0], &suffix = local[1];
  EXPECT_TRUE(pair(row, prefix, L, 64));
  EXPECT_FALSE(pair(row, suffix, L, 64));  // each row right to left
  // A pass that makes o's delta (its second source's walk, or a later pass, reads it): none.
  const auto x = torch::empty({1, 2, L, 64}, torch::kBFloat16);
  fused::Backward a, b;
  a.pass = fused_glue::make_pass(row, x, x, x, x, x, 0.125);
  b.pass = fused_glue::make_pass(prefix, x, x, x, x, x, 0.125);
  ASSERT_TRUE(fused::pairable(a, b));
  a.made_delta = x.data_ptr();
  EXPECT_FALSE(fused::pairable(a, b));
}

// Rowmajor's local pass: u[(r, c)], q's row r over row r's keys, unmasked, for every row but the
// last (fused_axial.cpp).
FusedPass rowmajor_local(int64_t L, int64_t W) {
  const int64_t spans = L / W - 1;
  FusedPass local;
  local.query = {spans, W, W, 1, spans * W};
  local.key = local.value = {spans, W, W, 1, spans * W};
  local.mask = fused::Mask::kNone;
  return local;
}

// Segments longer than a tile (rows of 96 or 192: two or three query and key tiles) pair as two
// walks (walks_pairable): the key tiles' CTAs of both passes in one launch, then their query
// tiles'. Not at D 128, where each pass's walk and dq share a launch already; not where a pass
// writes dq over its d_o, which the other's dq CTAs could be reading.
TEST(Pairable, RowsLongerThanATilePairAsTwoWalks) {
  for (const int64_t W : {96, 192}) {
    const int64_t L = 64 * W;
    const auto row = rowmajor_joint_passes(L, W)[0];
    EXPECT_TRUE(pair(row, rowmajor_local(L, W), L, 64)) << "W " << W;
    EXPECT_TRUE(pair(row, rowmajor_local(L, W), L, 32)) << "W " << W;
    EXPECT_FALSE(pair(row, rowmajor_local(L, W), L, 128)) << "W " << W;
    // The column pass reads the summaries: it does not pair.
    EXPECT_FALSE(pair(rowmajor_joint_passes(L, W)[1], rowmajor_local(L, W), L, 64)) << "W " << W;
  }
  const int64_t L = 3072, W = 96;
  const auto x = torch::empty({1, 2, L, 64}, torch::kBFloat16);
  const auto d_u = torch::empty({1, 2, L - W, 64}, torch::kBFloat16);
  fused::Backward a, b;
  a.pass = fused_glue::make_pass(rowmajor_joint_passes(L, W)[0], x, x, x, x, x, 0.125);
  b.pass = fused_glue::make_pass(rowmajor_local(L, W), x, x, x, x, x, 0.125);
  ASSERT_TRUE(fused::pairable(a, b));
  EXPECT_EQ(fused::backward_launches(fused::BackwardPair{a, b}), 2);
  b.d_o = fused_glue::operand(d_u);
  b.dq = fused_glue::grad_out(d_u, fused::GradOut::kStore);  // dq over its d_o
  EXPECT_FALSE(fused::pairable(a, b));
  // Horizontal's row pass and its prefix pass at rows of 96 are two walks too, where the prefix
  // pass's queries' gradient is not written over u's (the glue writes it there, and runs them
  // apart).
  EXPECT_TRUE(pair(horizontal_joint_passes(L, W)[0],
                   pooled_plans::horizontal(L, W, /*on_chip=*/false).local[0],
                   L,
                   64));
}

void split_pair(const fused::ForwardPair& pair, void*) {
  fused::forward_cpu(pair.first);
  fused::forward_cpu(pair.second);
}
void split_pair(const fused::BackwardPair& pair, void*) {
  fused::backward_cpu(pair.first);
  fused::backward_cpu(pair.second);
}

// Forward: the same CTAs, and outputs of their own, neither merging.
TEST(Pairable, ForwardPassesWriteTheirOwnRowsWithoutMerging) {
  const int64_t L = 3072, W = 48;
  const auto x = torch::empty({1, 2, L, 64}, torch::kBFloat16);
  const auto o = torch::empty({1, 2, L, 64}, torch::kBFloat16), u = torch::empty_like(o);
  const auto lse = torch::empty({1, 2, L}), lse_u = torch::empty_like(lse);
  fused::Forward a, b;
  a.pass = fused_glue::make_pass(vertical_joint_passes(L, W)[1], x, x, x, x, x, 0.125);
  b.pass = fused_glue::make_pass(vertical_local(L, W), x, x, x, x, x, 0.125);
  a.o = o.data_ptr(), a.lse = lse.data_ptr(), b.o = u.data_ptr(), b.lse = lse_u.data_ptr();
  EXPECT_TRUE(fused::pairable(a, b));
  a.merge = true;  // into o's rows that another pass wrote: not here
  EXPECT_FALSE(fused::pairable(a, b));
  a.merge = false;
  b.lse = a.lse;  // one lse for both
  EXPECT_FALSE(fused::pairable(a, b));
  b.lse = lse_u.data_ptr();
  a.pass = fused_glue::make_pass(vertical_joint_passes(L, W)[0], x, x, x, x, x, 0.125);
  EXPECT_FALSE(fused::pairable(a, b));  // the row pass: other rows, and it reads the spans
}

TEST(PairedPasses, AreTheTwoLaunchesBitForBit) {
  fused_launch::HostKernels split;
  split.forward_pair = &split_pair;
  split.backward_pair = &split_pair;
  const std::vector<Case> cases = {
      {Variant::kVertical, 640, 10, 32, torch::kFloat},      // columns of 64 and 63 spans
      {Variant::kVertical, 320, 10, 64, torch::kBFloat16},   // 32 and 31: two to a tile
      {Variant::kVertical, 640, 10, 128, torch::kBFloat16},  // D 128
      {Variant::kVertical, 640, 20, 128, torch::kBFloat16},  // columns of 32, two to a tile
      {Variant::kVertical, 640, 10, 64, torch::kFloat},
      {Variant::kVertical, 320, 10, 16, torch::kDouble},
      // Columns of 130 rows, three query tiles: the forward pairs each tile's CTA, the backward
      // is not one CTA per column.
      {Variant::kVertical, 520, 4, 32, torch::kBFloat16, false},
      {Variant::kRowmajor, 200, 40, 64, torch::kBFloat16},  // rows of 40
      {Variant::kRowmajor, 96, 12, 32, torch::kFloat},      // rows of 12: packed
      {Variant::kRowmajor, 480, 96, 64, torch::kBFloat16},  // rows of 96: two walks
      {Variant::kRowmajor, 480, 96, 64, torch::kFloat},
      {Variant::kRowmajor, 600, 150, 32, torch::kBFloat16},  // three tiles, the last part-full
      {Variant::kHorizontal, 392, 48, 32, torch::kFloat},    // with its prefix pass
      {Variant::kHorizontal, 200, 40, 64, torch::kBFloat16}};
  for (const auto& c : cases)
    EXPECT_EQ(pair_cases::check(c, nullptr, &split), "") << pair_cases::name(c);
}

void split_backward(const fused::Backward& b, void*) {
  fused::Backward two = b;
  two.interleave = false;
  fused::backward_cpu(two);
}

// A backward's dk/dv walk and dq in one launch (kernel_plan.h interleaved_backward), its CTAs in
// their order, against the two launches: at D 128, rows of 96 (two query tiles and two key tiles a
// row), with spans by segment (vertical), packed short columns with theirs (horizontal's columns of
// 10), summaries by prefix after it (fixed).
TEST(InterleavedBackward, IsTheTwoLaunchesBitForBit) {
  fused_launch::HostKernels split;
  split.backward = &split_backward;
  const std::vector<Case> cases = {{Variant::kVertical, 960, 96, 128, torch::kBFloat16},
                                   {Variant::kVertical, 960, 96, 128, torch::kFloat},
                                   {Variant::kRowmajor, 960, 96, 128, torch::kBFloat16},
                                   {Variant::kHorizontal, 960, 96, 128, torch::kBFloat16},
                                   {Variant::kFixed, 960, 96, 128, torch::kFloat}};
  for (const auto& c : cases)
    EXPECT_EQ(pair_cases::check_interleaved(c, nullptr, &split), "") << pair_cases::name(c);
}

}  // namespace
}  // namespace combiner::attention::paired_test
