// Sampling's static decoder on the CUDA kernels' own source (the decode step kernel, the fused
// LayerNorm and the LayerNorm-and-linear kernel, run by the SIMT emulator), a whole sequence,
// against forward() on the LibTorch paths: the kernels as the sampler feeds them, strides,
// residuals and caches included. tests/model/decoder_test.cpp holds their CPU models to the same.
#include <gtest/gtest.h>

#include "emulated/emulated.h"
#include "model/decoder_model.h"
#include "model/static_decoder.h"
#include "simt/emulator.h"

namespace combiner::model {
namespace {

class EmulatedDecoderTest : public ::testing::TestWithParam<DecoderCase> {};

TEST_P(EmulatedDecoderTest, StaticStepOnTheKernelsEqualsForwardLogits) {
  auto model = random_model(GetParam(), /*width=*/32);  // a width the LayerNorm kernels take
  torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  set_kernel_path(*model, "composed");
  auto expected = model->forward(x);

  set_kernel_path(*model, "fused");
  const emulated::EmulatedKernels emulation;
  const int64_t before = simt::launches();
  StaticDecoder decoder(model, 3, /*capture=*/false);
  // As on the kernels' CPU models (tests/model/decoder_test.cpp): float32 sums in other orders,
  // logits up to ~13; a misread term gives ~1.
  EXPECT_LT(worst_step_error(decoder, input_tokens(x), expected), 2.5e-4);
  // Every step launches, per layer, the decode kernel and two norm-linear kernels at least.
  EXPECT_GE(simt::launches() - before, 48 * 2 * 3);
}

INSTANTIATE_TEST_SUITE_P(SomeVariants,
                         EmulatedDecoderTest,
                         ::testing::Values(DecoderCase{"combiner-axial-vertical", "max", 12, 12},
                                           DecoderCase{
                                               "combiner-axial-rowmajor", "deepsets-mean", 5, 8},
                                           DecoderCase{"combiner-fixed", "mean", 5, 8},
                                           DecoderCase{"combiner-axial-horizontal", "mean", 12, 12},
                                           DecoderCase{"combiner-mixture", "max", 12, 12},
                                           DecoderCase{"combiner-logsparse", "max", 12, 12},
                                           DecoderCase{"full", "max", 12, 12}),
                         [](const auto& info) {
                           std::string out = info.param.type + "_" + info.param.abstraction;
                           for (auto& ch : out)
                             if (ch == '-') ch = '_';
                           return out;
                         });

}  // namespace
}  // namespace combiner::model
