// The weights' bf16 copies (ops/weight_cast.h) on the kernel's CPU model: each copy LibTorch's own
// cast to the bit, all written by one launch into one buffer that later writes reuse, and what
// the copies refuse (the CUDA source on the emulator: tests/emulated/kernels_test.cpp).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "ops/weight_cast.h"
#include "ops/weight_cast_kernel.h"

namespace combiner::ops {
namespace {

bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && torch::equal(a.view(torch::kShort), b.view(torch::kShort));
}

// Sizes not a multiple of 8 (padding between copies), one element, ties between two bfloat16
// values (rounded to even), infinities, subnormals and values past bfloat16's largest.
std::vector<torch::Tensor> awkward_sources() {
  torch::manual_seed(12);
  std::vector<torch::Tensor> s = {torch::randn({16, 8}) * 3,
                                  torch::randn({7}),
                                  torch::randn({3, 5}) * 1e-3,
                                  torch::randn({1}),
                                  torch::randn({64, 33})};
  s.push_back(torch::tensor({1.f + 1.f / 256,  // halfway between 1 and 1 + 2^-7: to even, 1
                             1.f + 3.f / 256,  // halfway: to even, 1 + 2^-6
                             -1.f - 1.f / 256,
                             INFINITY,
                             -INFINITY,
                             1e-40f,
                             3.4e38f,
                             0.f,
                             -0.f}));
  return s;
}

TEST(WeightCopies, EachCopyIsLibTorchsCastToTheBit) {
  const auto sources = awkward_sources();
  WeightCopies copies(sources);
  ASSERT_EQ(copies.size(), sources.size());
  const int64_t before = weight_cast_launches();
  copies.write();
  EXPECT_EQ(weight_cast_launches() - before, kWeightCastLaunches);
  for (size_t i = 0; i < sources.size(); ++i)
    EXPECT_TRUE(same_bits(copies.copy(i), sources[i].to(torch::kBFloat16))) << i;
  // The ties went to even, not up.
  EXPECT_EQ(copies.copy(5)[0].item<float>(), 1.f);
  EXPECT_EQ(copies.copy(5)[1].item<float>(), 1.f + 1.f / 64);
}

// A later write reads the sources as they are then, into the same memory: a copy taken before
// the write sees it (views of one buffer, nothing allocated per write).
TEST(WeightCopies, AWriteReadsTheSourcesAsTheyAreIntoTheSameBuffer) {
  auto sources = awkward_sources();
  WeightCopies copies(sources);
  copies.write();
  const auto held = copies.copy(0);
  const void* where = held.data_ptr();
  sources[0].mul_(-2);
  copies.write();
  EXPECT_EQ(copies.copy(0).data_ptr(), where);
  EXPECT_TRUE(same_bits(held, sources[0].to(torch::kBFloat16)));
  // The copies lie in planning order, each 16-byte aligned.
  for (size_t i = 1; i < sources.size(); ++i) {
    const auto gap = reinterpret_cast<uintptr_t>(copies.copy(i).data_ptr()) -
                     reinterpret_cast<uintptr_t>(copies.copy(i - 1).data_ptr());
    EXPECT_EQ(gap, uintptr_t((sources[i - 1].numel() + 7) / 8 * 16)) << i;
  }
}

TEST(WeightCopies, CoversOnlyThePlannedTensors) {
  auto sources = awkward_sources();
  const WeightCopies copies(sources);
  EXPECT_TRUE(copies.covers(sources));
  auto fewer = sources;
  fewer.pop_back();
  EXPECT_FALSE(copies.covers(fewer));
  auto swapped = sources;
  std::swap(swapped[0], swapped[1]);
  EXPECT_FALSE(copies.covers(swapped));
  auto moved = sources;
  moved[2] = moved[2].clone();  // same values, other memory
  EXPECT_FALSE(copies.covers(moved));
}

TEST(WeightCopies, RefusesWhatTheKernelCannotTakeInOneLine) {
  auto why = [](const std::vector<torch::Tensor>& sources) {
    try {
      WeightCopies copies(sources);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(why({}), "weight copies: no tensors to copy");
  EXPECT_EQ(why({torch::randn({4}), torch::randn({4}).to(torch::kDouble)}),
            "weight copies: tensor 1 is not a contiguous float32 tensor");
  EXPECT_EQ(why({torch::randn({4, 6}).t()}),
            "weight copies: tensor 0 is not a contiguous float32 tensor");
}

// The kernel's tensor lookup: the last copy starting at or before an element.
TEST(WeightCastKernel, FindsTheTensorOfEveryElement) {
  const int64_t first[] = {0, 8, 16, 48};
  for (int64_t e = 0; e < 64; ++e)
    EXPECT_EQ(cast_tensor_of(first, 4, e), e < 8 ? 0 : e < 16 ? 1 : e < 48 ? 2 : 3) << e;
  EXPECT_EQ(cast_tensor_of(first, 1, 5), 0);
}

}  // namespace
}  // namespace combiner::ops
