// The backward's deltas made inside the passes (fused/kernel_pass.h Backward::summary_delta, u's,
// and Backward::made_delta, o's, one CTA per segment or in the dk/dv walk), on the CUDA kernels'
// source: the emulated delta kernel's to the bit (the same pieces and shuffles), each row written
// once, and the passes' gradients as without them, under both schedules of the emulator's
// threads; and a forward's CTAs making o's delta (Backward's first launch where it remakes a local
// pass, Forward::delta).
#include <gtest/gtest.h>

#include <vector>

#include "attention/delta_cases.h"
#include "simt/emulator.h"

namespace combiner::attention::emulated_deltas_test {
namespace {

using delta_cases::Case;

const delta_cases::Kernels kCuda = {
    [](const fused::Forward& f) { fused::forward_cuda(f, nullptr); },
    [](const fused::Backward& b) { fused::backward_cuda(b, nullptr); },
    [](const fused::Delta& d) { fused::delta_cuda(d, nullptr); }};

void check_both_schedules(const std::vector<Case>& cases, bool made, bool walk = false) {
  for (const auto& c : cases)
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      EXPECT_EQ(delta_cases::check(c, kCuda, made, walk), "") << delta_cases::name(c);
      EXPECT_GT(simt::launches(), before) << delta_cases::name(c) << ": no kernel was emulated";
    }
}

TEST(SimtPassDeltas, UsIsTheDeltaKernelsBitForBit) {
  check_both_schedules({{false, 72, 8, 32, torch::kFloat},
                        {false, 200, 40, 64, torch::kBFloat16},
                        {false, 200, 40, 128, torch::kBFloat16},
                        {false, 216, 72, 64, torch::kBFloat16},
                        {true, 200, 40, 64, torch::kBFloat16},
                        {true, 96, 12, 32, torch::kFloat},
                        {true, 200, 40, 128, torch::kBFloat16}},
                       false);
}

TEST(SimtPassDeltas, OsIsTheDeltaKernelsBitForBit) {
  check_both_schedules({{false, 200, 40, 64, torch::kBFloat16},
                        {false, 1280, 20, 32, torch::kFloat},
                        {true, 200, 40, 64, torch::kBFloat16},
                        {true, 200, 40, 128, torch::kBFloat16},
                        {true, 96, 12, 32, torch::kFloat},
                        {false, 200, 40, 64, torch::kBFloat16, true},
                        {false, 72, 8, 32, torch::kFloat, true},
                        {true, 200, 40, 64, torch::kBFloat16, true}},
                       true);
}

// Gradients scaled where the pass writes them (Backward::grad_scale): those of d_o scaled first,
// to the bit, stored or added; the deltas the pass makes are u's of the gradient as stored and
// o's of d_o as given.
TEST(SimtPassDeltas, GradientsScaledInThePassAreThoseOfAScaledDo) {
  for (const Case& c : std::vector<Case>{{false, 72, 8, 32, torch::kFloat},
                                         {false, 200, 40, 64, torch::kBFloat16},
                                         {true, 200, 40, 128, torch::kBFloat16},
                                         {true, 400, 100, 64, torch::kBFloat16}})
    for (const bool made : {false, true})
      for (const auto kind : {fused::GradOut::kStore, fused::GradOut::kAtomic}) {
        const int64_t before = simt::launches();
        EXPECT_EQ(delta_cases::check_grad_scale(c, kCuda, made, kind), "")
            << delta_cases::name(c) << (made ? ", o's delta" : ", u's delta")
            << (kind == fused::GradOut::kStore ? ", stored" : ", added");
        EXPECT_GT(simt::launches(), before) << delta_cases::name(c) << ": no kernel was emulated";
      }
}

// o a mean of two calls' outputs (combiner-mixture's second call): its delta made from the other
// call's (Delta::other_delta) by the delta kernel and by the passes and forwards that make it, to
// the bit; the last pass storing the mean (Forward::mean_with), merging or not.
TEST(SimtPassDeltas, OsDeltaOfAMeanIsMadeFromTheOtherCallsDelta) {
  for (const Case& c :
       std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16}, {true, 96, 12, 32, torch::kFloat}})
    EXPECT_EQ(delta_cases::check_own_delta(c, kCuda), "") << delta_cases::name(c);
  check_both_schedules({{false, 200, 40, 64, torch::kBFloat16, false, true},
                        {true, 96, 12, 32, torch::kFloat, false, true},
                        {false, 200, 40, 64, torch::kBFloat16, true, true}},
                       true);
  check_both_schedules({{true, 400, 100, 64, torch::kBFloat16, false, true}}, true, true);
  EXPECT_EQ(
      delta_cases::check_forward_delta({false, 200, 40, 64, torch::kBFloat16, false, true}, kCuda),
      "");
}

TEST(SimtPassDeltas, APassStoresTheMeanOfItsOAndAnotherCalls) {
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16},
                                         {false, 72, 8, 32, torch::kFloat},
                                         {true, 200, 40, 32, torch::kFloat},
                                         {true, 200, 40, 128, torch::kBFloat16}})
    for (const bool merge : {false, true}) {
      const int64_t before = simt::launches();
      EXPECT_EQ(delta_cases::check_mean_with(c, kCuda, merge), "")
          << delta_cases::name(c) << (merge ? ", merging" : "");
      EXPECT_GT(simt::launches(), before) << delta_cases::name(c) << ": no kernel was emulated";
    }
}

// Made in the dk/dv kernel's walk, two key tiles a segment, and read by the dq kernel after it
// (kernel_plan.h walk_makes_delta): only the CTAs of each segment's first key tile write it.
TEST(SimtPassDeltas, ADkvWalkMakesOsDeltaAsTheDeltaKernel) {
  check_both_schedules({{true, 400, 100, 64, torch::kBFloat16},
                        {false, 400, 4, 32, torch::kFloat},
                        {true, 300, 100, 32, torch::kBFloat16}},
                       true,
                       true);
}

// The forward kernel's delta CTAs (Forward::delta): rows that do not fill the last CTA (200 at
// 32 / 64 / 128 rows a CTA in bf16, 32 / 16 in float32), packed passes (rows of 5 and 8) and
// passes of one tile a segment.
TEST(SimtPassDeltas, AForwardMakesOsDeltaAsTheDeltaKernel) {
  for (const Case& c : std::vector<Case>{{false, 200, 40, 64, torch::kBFloat16},
                                         {false, 200, 40, 128, torch::kBFloat16},
                                         {true, 200, 40, 32, torch::kFloat},
                                         {false, 72, 8, 32, torch::kBFloat16},
                                         {true, 200, 40, 128, torch::kFloat}})
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      EXPECT_EQ(delta_cases::check_forward_delta(c, kCuda), "") << delta_cases::name(c);
      EXPECT_EQ(simt::launches() - before, 3) << delta_cases::name(c);  // two forwards, one delta
    }
}

}  // namespace
}  // namespace combiner::attention::emulated_deltas_test
