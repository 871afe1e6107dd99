// Two passes in one launch (fused/kernel_pass.h ForwardPair, BackwardPair) on the CUDA kernels'
// source: the pair kernels, each CTA running the first pass's segment and then the second's (in
// the backward over the rows the first has just written), against the same fused calls with each
// pair's passes launched in turn (also emulated), to the bit, under both schedules of the
// emulator's threads (attention/pair_cases.h): one CTA per segment, and two walks (rowmajor's
// rows of 96 and 150). The same for a backward's walk and dq in one launch.
#include <gtest/gtest.h>

#include <vector>

#include "attention/pair_cases.h"
#include "emulated/emulated.h"
#include "simt/emulator.h"

namespace combiner::attention::emulated_paired_test {
namespace {

using pair_cases::Case;
using pair_cases::Variant;

void split_pair(const fused::ForwardPair& pair, void* stream) {
  fused::forward_cuda(pair.first, stream);
  fused::forward_cuda(pair.second, stream);
}
void split_pair(const fused::BackwardPair& pair, void* stream) {
  fused::backward_cuda(pair.first, stream);
  fused::backward_cuda(pair.second, stream);
}

// The table EmulatedKernels has installed (left installed), for a copy with an entry changed.
const fused_launch::HostKernels* installed_kernels() {
  const auto* table = fused_launch::set_host_kernels(nullptr);
  fused_launch::set_host_kernels(table);
  return table;
}

TEST(SimtPairedPasses, AreTheTwoLaunchesBitForBit) {
  const emulated::EmulatedKernels emulation;
  // The emulated kernels, each pair as two launches.
  const auto* emulated = installed_kernels();
  fused_launch::HostKernels split = *emulated;
  split.forward_pair = &split_pair;
  split.backward_pair = &split_pair;
  const std::vector<Case> cases = {{Variant::kVertical, 640, 10, 32, torch::kFloat},
                                   {Variant::kVertical, 320, 10, 64, torch::kBFloat16},
                                   {Variant::kVertical, 640, 10, 128, torch::kBFloat16},
                                   {Variant::kVertical, 640, 20, 128, torch::kBFloat16},
                                   {Variant::kVertical, 640, 10, 64, torch::kFloat},
                                   {Variant::kVertical, 520, 4, 32, torch::kBFloat16, false},
                                   {Variant::kRowmajor, 96, 12, 32, torch::kFloat},
                                   {Variant::kRowmajor, 480, 96, 64, torch::kBFloat16},
                                   {Variant::kRowmajor, 600, 150, 32, torch::kFloat},
                                   {Variant::kHorizontal, 200, 40, 64, torch::kBFloat16}};
  for (const auto& c : cases)
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      EXPECT_EQ(pair_cases::check(c, emulated, &split), "") << pair_cases::name(c);
      EXPECT_GT(simt::launches(), before) << pair_cases::name(c) << ": no kernel was emulated";
    }
}

void split_backward(const fused::Backward& b, void* stream) {
  fused::Backward two = b;
  two.interleave = false;
  fused::backward_cuda(two, stream);
}

// The interleaved kernel (kernel_plan.h interleaved_backward) against the dk/dv and dq kernels it
// replaces, each launched alone, to the bit under both schedules: rows of 96 at D 128 with their
// spans, packed short columns with theirs, and summaries by prefix in a launch after it.
TEST(SimtInterleavedBackward, IsTheTwoLaunchesBitForBit) {
  const emulated::EmulatedKernels emulation;
  const auto* emulated = installed_kernels();
  fused_launch::HostKernels split = *emulated;
  split.backward = &split_backward;
  const std::vector<Case> cases = {{Variant::kVertical, 480, 96, 128, torch::kBFloat16},
                                   {Variant::kVertical, 480, 96, 128, torch::kFloat},
                                   {Variant::kHorizontal, 480, 96, 128, torch::kBFloat16},
                                   {Variant::kFixed, 480, 96, 128, torch::kBFloat16}};
  for (const auto& c : cases)
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      const auto as_is = pair_cases::run(c, emulated);
      const int64_t one = simt::launches() - before;
      const auto two_launches = pair_cases::run(c, &split);
      const int64_t two = simt::launches() - before - one;
      EXPECT_LT(one, two) << pair_cases::name(c) << ": as many kernels emulated either way";
      EXPECT_EQ(pair_cases::compare_interleaved(as_is, two_launches), "") << pair_cases::name(c);
    }
}

}  // namespace
}  // namespace combiner::attention::emulated_paired_test
