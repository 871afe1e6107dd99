// The cached decoder against the full forward pass: for every variant and abstraction, the
// logits of each step equal forward()'s at that position, on a model with weights large enough
// that attention is far from uniform.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/plan.h"
#include "model/decoder.h"
#include "model/decoder_model.h"
#include "model/static_decoder.h"

namespace combiner::model {
namespace {

std::vector<DecoderCase> cases() {
  std::vector<DecoderCase> out;
  for (const auto& type : attention::variant_names())
    for (const auto& abstraction : attention::abstraction_names()) {
      if (!attention::is_combiner(type) && abstraction != "max") continue;
      out.push_back({type, abstraction, 12, 12});  // a block and a row = one image row
      out.push_back({type, abstraction, 5, 8});    // layouts that cut across image rows
    }
  return out;
}

std::string name(const DecoderCase& c) {
  std::string out = c.type + "_" + c.abstraction + "_s" + std::to_string(c.block) + "_W" +
                    std::to_string(c.row_len);
  for (auto& ch : out)
    if (ch == '-') ch = '_';
  return out;
}

class DecoderTest : public ::testing::TestWithParam<DecoderCase> {};

// Logits up to ~13 through two layers of N(0, 0.5) weights, whose q and k are large enough that
// rounding them to bfloat16 (relative 2^-9) moves scores by whole units: the largest change seen
// over every case is 0.78, the smallest 0.13.
constexpr double kBFloat16LogitError = 1.5;

TEST_P(DecoderTest, StepLogitsEqualForwardLogits) {
  auto model = random_model(GetParam());
  torch::NoGradGuard no_grad;
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  auto expected = model->forward(x);  // [3, 48, 256]

  Decoder decoder(model);
  auto tokens = input_tokens(x);
  EXPECT_LT(worst_step_error(decoder, tokens, expected), 1e-4);
  EXPECT_GT(expected.std().item<double>(), 1.0);  // the comparison is not between near-zeros
  EXPECT_THROW(decoder.step(tokens.select(1, 0)), c10::Error);
}

// The decoder of fixed shapes (what a GPU captures), run op by op here: the same logits.
TEST_P(DecoderTest, StaticStepLogitsEqualForwardLogits) {
  auto model = random_model(GetParam());
  torch::NoGradGuard no_grad;
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  auto expected = model->forward(x);

  StaticDecoder decoder(model, 3, /*capture=*/true);  // no CUDA here: nothing to capture
  auto tokens = input_tokens(x);
  EXPECT_LT(worst_step_error(decoder, tokens, expected), 1e-4);
  EXPECT_FALSE(decoder.captured());
  EXPECT_TRUE(decoder.capture_error().empty());
  EXPECT_EQ(decoder.mean_replay_ms(), -1.0) << "nothing replayed, nothing timed";
  EXPECT_THROW(decoder.step(tokens.select(1, 0)), c10::Error);
}

// The same on a GPU's paths, their CPU models here: the decode kernel for every attention step
// and the LayerNorm-and-linear kernel for each LayerNorm with its residual add and the projection
// after it (a width it takes), against forward() on the LibTorch paths.
TEST_P(DecoderTest, StaticStepOnTheKernelPathsEqualsForwardLogits) {
  auto model = random_model(GetParam(), /*width=*/32);
  torch::NoGradGuard no_grad;
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  set_kernel_path(*model, "composed");
  auto expected = model->forward(x);

  set_kernel_path(*model, "fused");
  StaticDecoder decoder(model, 3, /*capture=*/false);
  // float32 sums in other orders through two layers of N(0, 0.5) weights, logits up to ~13: the
  // largest error seen is 1.3e-4 (the LibTorch paths' 1.6e-5); a misread term gives ~1.
  EXPECT_LT(worst_step_error(decoder, input_tokens(x), expected), 2.5e-4);
  EXPECT_GT(expected.std().item<double>(), 1.0);
}

// With bfloat16 caches, on the LibTorch ops and on the kernels' CPU models: near forward()'s
// logits, and not at float32's distance from them (the caches are bfloat16). The two paths do not
// agree to float32 rounding here: their LayerNorms differ in the last bits, which moves some
// values across a bfloat16 rounding boundary. Attention over the rounded values is held exactly
// to forward() of the rounded inputs in tests/attention/decode_test.cpp.
TEST_P(DecoderTest, StaticStepWithBFloat16CachesStaysNearForwardLogits) {
  auto model = random_model(GetParam(), /*width=*/32);
  torch::NoGradGuard no_grad;
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  set_kernel_path(*model, "composed");
  const auto expected = model->forward(x);
  const auto tokens = input_tokens(x);
  auto all_logits = [&](const std::string& path) {
    set_kernel_path(*model, path);
    StaticDecoder decoder(model, 3, /*capture=*/false, /*bfloat16_cache=*/true);
    std::vector<torch::Tensor> logits;
    for (int64_t i = 0; i < tokens.size(1); ++i)
      logits.push_back(decoder.step(tokens.select(1, i)));
    return torch::stack(logits, 1);
  };
  for (const auto& path : {"composed", "fused"}) {
    const double error = (all_logits(path) - expected).abs().max().item<double>();
    EXPECT_LT(error, kBFloat16LogitError) << path;
    EXPECT_GT(error, 1e-3) << path << ": not the float32 caches' result";
  }
}

TEST(StaticDecoderTest, RefusesTokensOfAnotherBatch) {
  auto model = random_model({"combiner-axial-vertical", "max", 12, 12});
  torch::NoGradGuard no_grad;
  StaticDecoder decoder(model, 3, /*capture=*/false);
  EXPECT_THROW(decoder.step(torch::zeros({2}, torch::kLong)), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(AllVariants,
                         DecoderTest,
                         ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name(info.param); });

}  // namespace
}  // namespace combiner::model
