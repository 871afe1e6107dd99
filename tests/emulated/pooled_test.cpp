// The pooled local passes (FusedPass::pooled: vertical's and horizontal's running max pools made
// in the passes' own tiles, and taken back in their backward's epilogue) on the CUDA kernels'
// source: the forward's pooled queries and its ks, the backward walk's pooled queries (carried
// across its two query tiles at D 128) and the pools' backward, against the same call with the
// pools made and taken back by the scan kernels (also emulated): o and the projection's gradient
// to the bit, segments one to a tile and packed several to a tile, and segments of two and three
// tiles (whose forward, dq and dk/dv walk pool each tile carried from the segment's rows before
// it, read again, and whose pools' backward is the scans'), under both schedules of the
// emulator's threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/checks.h"
#include "attention/fused/fused.h"
#include "attention/pooled_plans.h"
#include "attention/span_ops.h"
#include "emulated/emulated.h"
#include "simt/emulator.h"

namespace combiner::attention::emulated_pooled_test {
namespace {

// Vertical's or horizontal's plan (attention/pooled_plans.h), its pools made by the scan kernel
// or on chip: o and the projection's gradient.
std::vector<torch::Tensor> run(const torch::Tensor& projection,
                               const torch::Tensor& d_o,
                               bool horizontal,
                               int64_t W,
                               bool on_chip) {
  const int64_t B = d_o.size(0), H = d_o.size(1), L = d_o.size(2), D = d_o.size(3);
  // (Horizontal's pooled passes over the W - 1 columns of each row, as fused_axial.cpp plans
  // them; the scans' too where those are one tile: a packed tile of other segment lengths sums a
  // row's terms in another order. Longer, the scans' over whole rows.)
  const int64_t len = W - 1 <= fused::kQueryTile ? W - 1 : W;
  const auto plan = !horizontal ? pooled_plans::vertical(L, W, on_chip)
                    : on_chip   ? pooled_plans::horizontal(L, W, true)
                                : pooled_plans::horizontal_over(L, W, false, len);
  const auto qkv = projection.view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
  const auto o = fused_attention_with_local(
      qkv[0], qkv[1], qkv[2], {}, {}, plan.local, plan.joint, score_scale(D), plan.pools);
  return {o, torch::autograd::grad({o}, {projection}, {d_o})[0]};
}

TEST(SimtPooled, ThePooledPassesAreTheScanKernelsBitForBit) {
  struct Shape {
    bool horizontal;
    int64_t L, W, D;
    torch::ScalarType dtype;
  };
  const std::vector<Shape> shapes = {
      {false, 328, 8, 64, torch::kBFloat16},   // columns of 40
      {false, 328, 8, 128, torch::kBFloat16},  // two walk tiles
      {false, 126, 6, 128, torch::kBFloat16},  // three to a tile
      {false, 126, 6, 32, torch::kFloat},
      {true, 200, 40, 64, torch::kBFloat16},  // rows of 40
      {true, 200, 40, 128, torch::kBFloat16},
      {true, 96, 12, 32, torch::kFloat},      // rows of 12: packed
      {false, 568, 8, 64, torch::kBFloat16},  // columns of 70
      {false, 568, 8, 32, torch::kFloat},
      {false, 264, 4, 32, torch::kFloat},      // of 65: one row past
      {true, 288, 96, 64, torch::kBFloat16},   // 95 columns
      {true, 288, 96, 128, torch::kBFloat16},  // walk and dq: one launch
      {true, 450, 150, 32, torch::kFloat}};    // 149: three tiles
  const emulated::EmulatedKernels emulation;
  for (const auto& s : shapes) {
    const std::string name = std::string(s.horizontal ? "horizontal" : "vertical") + " L " +
                             std::to_string(s.L) + " W " + std::to_string(s.W) + " D " +
                             std::to_string(s.D) + " " + c10::toString(s.dtype);
    torch::manual_seed(21);
    const int64_t B = 1, H = 2;
    const auto projection = torch::randn({B, s.L, 3 * H * s.D}).to(s.dtype).requires_grad_();
    const auto d_o = torch::randn({B, H, s.L, s.D}).to(s.dtype);
    const auto scans = run(projection, d_o, s.horizontal, s.W, false);
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      // (The buffers the glue leaves unzeroed hold NaN: horizontal's passes over W - 1 columns
      // leave each row's whole prefix and suffix unmade, which no kernel may read.)
      const fused_glue::PoisonUnsetScope poison;
      const int64_t before = simt::launches();
      const auto pooled = run(projection, d_o, s.horizontal, s.W, true);
      EXPECT_GT(simt::launches(), before) << name << ": no kernel was emulated";
      EXPECT_TRUE(torch::equal(pooled[0], scans[0])) << name << ": o";
      EXPECT_TRUE(torch::equal(pooled[1], scans[1])) << name << ": the projection's gradient";
    }
    EXPECT_GT(scans[1].abs().sum().item<double>(), 0) << name;
  }
}

}  // namespace
}  // namespace combiner::attention::emulated_pooled_test
