// The fused loss (ops/cross_entropy.h) on its kernels' CPU model: its numbers against LibTorch's
// cross-entropy (the composed reference, which the trainer ran before), what it keeps and
// refuses, and what it counts (against float64 at every size: kernel-check's loss table,
// tests/tools/loss_check_test.cpp; the CUDA source bit for bit: tests/emulated).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <string>

#include "ops/cross_entropy.h"
#include "tensor_checks.h"
#include "util/device.h"

namespace combiner::ops {
namespace {

using combiner::testing::max_abs_diff;

// float32 logits as the head makes them ([B, L, 256]), each target dtype the trainer and the
// evaluator pass: the mean and each row's bits, and the logits' gradient, are the composed
// loss's to float32's rounding.
TEST(FusedLoss, IsTheComposedCrossEntropyInFloat32) {
  for (const auto target_dtype : {torch::kByte, torch::kLong, torch::kInt})
    for (const bool mean : {true, false}) {
      torch::manual_seed(5);
      const auto z0 = torch::randn({3, 50, 256}) * 4.0;
      const auto x = torch::randint(0, 256, {3, 50}).to(target_dtype);
      const auto up = mean ? torch::ones({}) : torch::randn({3, 50});
      auto z = z0.clone().requires_grad_(), zr = z0.clone().requires_grad_();
      const auto bits = cross_entropy_bits(z, x, mean);
      const auto ref = cross_entropy_bits_composed(zr, x, mean);
      EXPECT_EQ(bits.sizes(), ref.sizes());
      EXPECT_EQ(bits.scalar_type(), torch::kFloat);
      EXPECT_LT(max_abs_diff(bits, ref), 1e-5) << target_dtype << " " << mean;
      bits.backward(up);
      ref.backward(up);
      EXPECT_EQ(z.grad().sizes(), z0.sizes());
      // Relative to the largest element (the mean's gradient is (p - onehot) / (rows ln 2)).
      const double largest = zr.grad().abs().max().item<double>();
      EXPECT_GT(largest, mean ? 1e-3 : 1e-1);
      EXPECT_LT(max_abs_diff(z.grad(), zr.grad()), 1e-6 * largest) << target_dtype << mean;
    }
}

// bfloat16 logits: the bits in float32 from the values as stored, the gradient written in
// bfloat16 (rounded once from float32).
TEST(FusedLoss, BFloat16LogitsGiveFloat32BitsAndABFloat16Gradient) {
  torch::manual_seed(6);
  const auto z0 = (torch::randn({400, 256}) * 3.0).to(torch::kBFloat16);
  const auto x = torch::randint(0, 256, {400}, torch::kByte);
  auto z = z0.clone().requires_grad_();
  const auto bits = cross_entropy_bits(z, x, false);
  EXPECT_EQ(bits.scalar_type(), torch::kFloat);
  const auto up = torch::randn({400});
  bits.backward(up);
  EXPECT_EQ(z.grad().scalar_type(), torch::kBFloat16);
  auto zr = z0.to(torch::kDouble).requires_grad_();
  const auto ref = cross_entropy_bits_composed(zr, x, false).to(torch::kDouble);
  auto nats = -torch::log_softmax(zr, -1).gather(-1, x.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
  (nats / std::log(2.0)).backward(up.to(torch::kDouble));
  EXPECT_LT(max_abs_diff(bits, ref), 1e-5);
  const double largest = zr.grad().abs().max().item<double>();
  EXPECT_LT(max_abs_diff(z.grad(), zr.grad()), largest * std::ldexp(1.0, -8));
}

// Logits far from zero: the row's max is taken out before the exponentials (LibTorch's too).
TEST(FusedLoss, LargeLogitsDoNotOverflow) {
  auto z = torch::zeros({2, 256});
  z[0][7] = 1e4;  // a certain prediction: 0 bits for 7, 1e4 / ln 2 for anything else
  z[1].fill_(-1e4);
  const auto x = torch::tensor({7, 3}, torch::kLong);
  const auto bits = cross_entropy_bits(z.requires_grad_(), x, false);
  EXPECT_NEAR(bits[0].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(bits[1].item<double>(), 8.0, 1e-5);  // a uniform row: log2 256
  bits.sum().backward();
  EXPECT_TRUE(torch::isfinite(z.grad()).all().item<bool>());
}

// A target outside the vocabulary (a corrupt batch, or a model whose vocabulary is smaller than
// the data's values) gives NaN in its row only: the trainer's non-finite check skips that step.
TEST(FusedLoss, ATargetOutsideTheVocabularyGivesNaNInItsRow) {
  torch::manual_seed(7);
  auto z = torch::randn({3, 16}).requires_grad_();
  const auto x = torch::tensor({2, 16, -1}, torch::kLong);
  const auto bits = cross_entropy_bits(z, x, false);
  EXPECT_TRUE(std::isfinite(bits[0].item<float>()));
  EXPECT_TRUE(std::isnan(bits[1].item<float>()));
  EXPECT_TRUE(std::isnan(bits[2].item<float>()));
  bits.backward(torch::ones({3}));
  EXPECT_TRUE(torch::isfinite(z.grad()[0]).all().item<bool>());
  EXPECT_TRUE(torch::isnan(z.grad()[1]).all().item<bool>());
  EXPECT_TRUE(std::isnan(cross_entropy_bits(z, x, true).item<float>()));
}

TEST(FusedLoss, BadInputsGiveOneLineErrors) {
  const auto z = torch::randn({2, 5, 8});
  const auto x = torch::zeros({2, 5}, torch::kLong);
  auto message = [](const torch::Tensor& logits, const torch::Tensor& targets) {
    try {
      cross_entropy_bits(logits, targets, true);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto dtype = message(z.to(torch::kDouble), x);
  EXPECT_NE(dtype.find("float32 or bfloat16"), std::string::npos) << dtype;
  EXPECT_NE(dtype.find("Double"), std::string::npos) << dtype;
  const auto shape = message(z, torch::zeros({2, 4}, torch::kLong));
  EXPECT_NE(shape.find("[2, 5]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("[2, 4]"), std::string::npos) << shape;
  EXPECT_FALSE(message(z, x.to(torch::kFloat)).empty());
  EXPECT_FALSE(message(torch::randn({2, 0}), torch::zeros({2}, torch::kLong)).empty());
  for (const auto& m : {dtype, shape}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(cross_entropy_unsupported(z, x).empty());
}

// One kernel each way, as a GPU launches them (the mean's reduction is LibTorch's own op).
TEST(FusedLoss, LaunchesOneKernelEachWay) {
  const auto z = torch::randn({4, 32, 256}).requires_grad_();
  const auto x = torch::randint(0, 256, {4, 32}, torch::kByte);
  const int64_t before = cross_entropy_launches();
  const auto loss = cross_entropy_bits(z, x, true);
  EXPECT_EQ(cross_entropy_launches() - before, 1);
  loss.backward();
  EXPECT_EQ(cross_entropy_launches() - before, 2);
}

// What each loss keeps for backward, and its peak through backward, in bytes of the CPU
// allocator's tensors, the logits made by an op (as the head makes them) and dropped by the
// caller: the fused loss keeps the logits, one float per row and the loss; LibTorch's keeps the
// log-probabilities (the logits' size) and the targets in int64, and its backward holds three
// tensors of the logits' size at once where the fused one holds two.
TEST(FusedLoss, KeepsTheLogitsAndOneFloatPerRowAndPeaksALogitsSizeLower) {
  constexpr int64_t kRows = 2 * 96, kV = 256;
  struct Bytes {
    int64_t kept = 0, peak = 0;
  };
  auto measure = [&](bool fused) {
    torch::manual_seed(8);
    const auto w = torch::randn({kRows, kV}).requires_grad_();
    const auto x = torch::randint(0, kV, {2, 96}, torch::kByte);
    const torch::Device cpu(torch::kCPU);
    util::count_cpu_tensor_bytes();
    util::reset_peak_memory(cpu);
    const double before = util::device_allocated_mib(cpu);
    const auto bytes = [&](double mib) { return std::llround((mib - before) * 1024 * 1024); };
    Bytes b;
    torch::Tensor loss;
    {
      const auto logits = (w * 2.0).view({2, 96, kV});
      loss = fused ? cross_entropy_bits(logits, x, true)
                   : cross_entropy_bits_composed(logits, x, true);
    }
    b.kept = bytes(util::device_allocated_mib(cpu));
    loss.backward();
    b.peak = bytes(util::device_peak_mib(cpu));
    return b;
  };
  const auto fused = measure(true), composed = measure(false);
  const int64_t logits = kRows * kV * 4;
  EXPECT_EQ(fused.kept, logits + kRows * 4 + 4);
  EXPECT_GE(composed.kept, logits + kRows * 8);
  // At its peak the fused loss still holds its float per row.
  EXPECT_GE(composed.peak - fused.peak, logits - kRows * 4);
}

}  // namespace
}  // namespace combiner::ops
