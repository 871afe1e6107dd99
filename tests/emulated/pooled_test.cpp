// The pooled local pass (FusedPass::pooled: vertical's running max pools made in the pass's own
// tiles) on the CUDA kernels' source: the forward's pooled queries and its ks, and the backward
// walk's pooled queries, carried across its two query tiles at D 128, against the same call
// with the pools made by the scan kernel (also emulated): o and the gradients of q, k and v to
// the bit, columns one to a tile and packed several to a tile, under both schedules of the
// emulator's threads.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/fused.h"
#include "attention/span_ops.h"
#include "emulated/emulated.h"
#include "simt/emulator.h"

namespace combiner::attention::emulated_pooled_test {
namespace {

std::vector<torch::Tensor> vertical(const torch::Tensor& projection,
                                    const torch::Tensor& d_o,
                                    int64_t W,
                                    bool on_chip) {
  const int64_t B = d_o.size(0), H = d_o.size(1), L = d_o.size(2), D = d_o.size(3);
  const int64_t spans = (L + W - 1) / W - 1;
  std::vector<FusedPool> pools = {FusedPool::running_max(false, spans, W, 2, false, 0),
                                  FusedPool::running_max(true, spans, W, 2, false, 0)};
  FusedPass local;
  local.query = local.key = local.value = {W, spans, 1, W, spans * W};
  local.mask = fused::Mask::kCausal;
  local.pooled = on_chip;
  for (auto& p : pools) p.on_chip = on_chip;
  const auto qkv = projection.view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
  const auto o = fused_attention_with_local(
      qkv[0], qkv[1], qkv[2], {}, {}, {local}, vertical_joint_passes(L, W), score_scale(D), pools);
  return {o, torch::autograd::grad({o}, {projection}, {d_o})[0]};
}

TEST(SimtPooled, ThePooledPassIsTheScanKernelsBitForBit) {
  struct Shape {
    int64_t L, W, D;
    torch::ScalarType dtype;
  };
  const std::vector<Shape> shapes = {{328, 8, 64, torch::kBFloat16},   // columns of 40 rows
                                     {328, 8, 128, torch::kBFloat16},  // two walk tiles
                                     {126, 6, 128, torch::kBFloat16},  // three to a tile
                                     {126, 6, 32, torch::kFloat}};
  const emulated::EmulatedKernels emulation;
  for (const auto& s : shapes) {
    const std::string name = "L " + std::to_string(s.L) + " W " + std::to_string(s.W) + " D " +
                             std::to_string(s.D) + " " + c10::toString(s.dtype);
    torch::manual_seed(21);
    const int64_t B = 1, H = 2;
    const auto projection = torch::randn({B, s.L, 3 * H * s.D}).to(s.dtype).requires_grad_();
    const auto d_o = torch::randn({B, H, s.L, s.D}).to(s.dtype);
    const auto scans = vertical(projection, d_o, s.W, false);
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      const auto pooled = vertical(projection, d_o, s.W, true);
      EXPECT_GT(simt::launches(), before) << name << ": no kernel was emulated";
      EXPECT_TRUE(torch::equal(pooled[0], scans[0])) << name << ": o";
      EXPECT_TRUE(torch::equal(pooled[1], scans[1])) << name << ": the projection's gradient";
    }
    EXPECT_GT(scans[1].abs().sum().item<double>(), 0) << name;
  }
}

}  // namespace
}  // namespace combiner::attention::emulated_pooled_test
