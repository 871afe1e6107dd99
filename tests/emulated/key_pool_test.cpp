// The keys' segment maxes made and taken back in a local pass's CTAs (fused/kernel_pass.h
// Forward::key_pool, Backward::key_pool; segments of more than one key tile: made in the forward
// from k's rows, taken back in the dk/dv walk by the CTA of the arg-max's tile), and fixed's
// queries, the blocks' maxes of q (Forward::query_pool, Backward::query_pool), on the CUDA
// kernels' source: the pass and the emulated segment max kernel's to the bit, under both
// schedules of the emulator's threads.
#include <gtest/gtest.h>

#include <vector>

#include "attention/key_pool_cases.h"
#include "simt/emulator.h"

namespace combiner::attention::emulated_key_pool_test {
namespace {

using key_pool_cases::Case;

const key_pool_cases::Kernels kCuda = {
    [](const fused::Forward& f) { fused::forward_cuda(f, nullptr); },
    [](const fused::Backward& b) { fused::backward_cuda(b, nullptr); },
    [](const fused::SegmentMaxes& m) { fused::segment_max_forward_cuda(m, nullptr); },
    [](const fused::SegmentMaxes& m) { fused::segment_max_backward_cuda(m, nullptr); }};

TEST(SimtKeyPool, TheLocalPassMakesTheKeyMaxesAsTheSegmentMaxKernel) {
  for (const Case& c : std::vector<Case>{{false, 288, 48, 64, torch::kBFloat16},
                                         {false, 200, 40, 128, torch::kBFloat16, true},
                                         {true, 240, 48, 32, torch::kFloat},
                                         {true, 330, 64, 64, torch::kBFloat16, true},
                                         // the maxes' gradient in slabs, one a column
                                         {false, 288, 48, 64, torch::kBFloat16, false, 48},
                                         {false, 240, 40, 32, torch::kFloat, true, 40},
                                         // more than one key tile a segment: the backward in
                                         // the dk/dv walk
                                         {false, 480, 96, 64, torch::kBFloat16},
                                         {false, 480, 96, 32, torch::kBFloat16, false, 96},
                                         {false, 480, 96, 128, torch::kBFloat16, true},
                                         {true, 480, 96, 128, torch::kFloat, true},
                                         {false, 600, 150, 32, torch::kFloat, true},
                                         {true, 960, 192, 32, torch::kBFloat16, true}})
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      EXPECT_EQ(key_pool_cases::check(c, kCuda), "") << key_pool_cases::name(c);
      // Two forwards, two backwards (a walk and dq each where a segment is more than a tile, in
      // one launch at D 128), the segment max kernel each way, and its backward of the slabs'
      // sum.
      const int64_t backward_launches = c.W > 64 && c.D < 128 ? 2 : 1;
      const int64_t expected = 5 + 2 * backward_launches;
      EXPECT_EQ(simt::launches() - before, expected) << key_pool_cases::name(c);
    }
}

TEST(SimtKeyPool, FixedsLocalPassMakesAndTakesBackItsQueriesAsTheSegmentMaxKernel) {
  for (const Case& c : std::vector<Case>{{true, 240, 48, 32, torch::kFloat},
                                         {true, 330, 64, 64, torch::kBFloat16, true},
                                         {true, 200, 40, 128, torch::kBFloat16, true},
                                         {true, 198, 33, 64, torch::kFloat},
                                         // more than a query tile a block: the rest read from q
                                         {true, 480, 96, 64, torch::kBFloat16},
                                         {true, 480, 96, 32, torch::kFloat, true},
                                         {true, 960, 192, 32, torch::kFloat},
                                         // D 128: the dq CTAs beside the walk's, in one launch
                                         {true, 480, 96, 128, torch::kBFloat16, true}})
    for (const auto schedule : {simt::Schedule::kForward, simt::Schedule::kReverse}) {
      const simt::ScheduleScope scope(schedule);
      const int64_t before = simt::launches();
      // A bfloat16 pass's queries' gradient stored in float32 where the keys tie.
      const bool dy_acc = c.ties && c.dtype == torch::kBFloat16;
      EXPECT_EQ(key_pool_cases::check_query_pool(c, kCuda, dy_acc), "") << key_pool_cases::name(c);
      // Two forwards and the pool kernel; two backwards (a walk and dq each where a block is
      // more than a key tile, in one launch at D 128) and the pool kernel's backward.
      const int64_t backward_launches = c.W > 64 && c.D < 128 ? 2 : 1;
      EXPECT_EQ(simt::launches() - before, 4 + 2 * backward_launches) << key_pool_cases::name(c);
    }
}

}  // namespace
}  // namespace combiner::attention::emulated_key_pool_test
