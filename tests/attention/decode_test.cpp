// Incremental decoding against forward(): for every variant x abstraction x layout, feeding
// positions one at a time gives forward()'s output at every position, with the per-variant
// decoders (attention/decode.h) and with the one of fixed shapes (attention/static_decode.h).
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/decode.h"
#include "attention/static_decode.h"
#include "attention_cases.h"

namespace combiner::attention {
namespace {

using testing::Case;

class DecodeTest : public ::testing::TestWithParam<Case> {};

torch::Tensor decode_all(AttentionImpl& module, const testing::Inputs& in) {
  const int64_t L = in.q.size(2);
  auto state = module.start_decoding(L);
  std::vector<torch::Tensor> outputs;
  for (int64_t i = 0; i < L; ++i)
    outputs.push_back(state->step(in.q.select(2, i), in.k.select(2, i), in.v.select(2, i)));
  return torch::stack(outputs, 2);
}

// path kFused: the decode kernel's CPU model; gather_bytes 1: each span summarised in a call of
// its own.
torch::Tensor static_decode_all(AttentionImpl& module,
                                const Case& c,
                                const testing::Inputs& in,
                                StaticDecodeLayer::Path path,
                                int64_t gather_bytes = int64_t(256) << 20,
                                bool bfloat16_cache = false) {
  StaticDecodeInputs inputs(c.options(), c.length, torch::kCPU);
  StaticDecodeLayer layer(module.span_summary(), {path, bfloat16_cache, gather_bytes});
  std::vector<torch::Tensor> outputs;
  for (int64_t i = 0; i < c.length; ++i) {
    layer.summarize(inputs.prepare(i));
    outputs.push_back(layer.step(in.q.select(2, i), in.k.select(2, i), in.v.select(2, i), inputs));
  }
  return torch::stack(outputs, 2);
}

TEST_P(DecodeTest, StepsEqualForward) {
  const Case& c = GetParam();
  torch::manual_seed(7);  // DeepSets maps
  auto module = make_attention(c.options(), c.length, testing::kDim);
  auto in = testing::random_inputs(c.length, torch::kFloat, 21);
  in.q = in.q * 3;  // peaked attention, so a misplaced term shows
  torch::NoGradGuard no_grad;
  auto expected = module->forward(in.q, in.k, in.v);
  using Path = StaticDecodeLayer::Path;
  for (const auto& decoded :
       {decode_all(*module, in),
        static_decode_all(*module, c, in, Path::kComposed),
        static_decode_all(*module, c, in, Path::kFused),
        static_decode_all(*module, c, in, Path::kFused, /*gather_bytes=*/1)}) {
    ASSERT_EQ(decoded.sizes(), expected.sizes());
    EXPECT_LT((decoded - expected).abs().max().item<double>(), 1e-5);
  }
}

// With bfloat16 caches both paths compute attention over q, k and v rounded to bfloat16, in
// float32: forward()'s output on the rounded inputs, at every position, to float32 rounding.
TEST_P(DecodeTest, BFloat16CachesGiveForwardOfTheRoundedInputs) {
  const Case& c = GetParam();
  torch::manual_seed(7);
  auto module = make_attention(c.options(), c.length, testing::kDim);
  auto in = testing::random_inputs(c.length, torch::kFloat, 24);
  in.q = in.q * 3;
  torch::NoGradGuard no_grad;
  auto rounded = [](const torch::Tensor& x) { return x.to(torch::kBFloat16).to(torch::kFloat); };
  const auto expected = module->forward(rounded(in.q), rounded(in.k), rounded(in.v));
  const auto exact = module->forward(in.q, in.k, in.v);
  using Path = StaticDecodeLayer::Path;
  for (const auto path : {Path::kComposed, Path::kFused}) {
    const auto decoded = static_decode_all(*module, c, in, path, int64_t(256) << 20, true);
    EXPECT_LT((decoded - expected).abs().max().item<double>(), 1e-5) << int(path);
    // and not the float32 caches' output: the rounding is there
    EXPECT_GT((decoded - exact).abs().max().item<double>(), 1e-4) << int(path);
  }
}

// The decode kernel's model against the ops it replaces, in float64: the same terms, weights and
// sums, so they agree to rounding.
TEST_P(DecodeTest, FusedStepEqualsTheOpsInFloat64) {
  const Case& c = GetParam();
  torch::manual_seed(7);
  auto module = make_attention(c.options(), c.length, testing::kDim);
  module->to(torch::kDouble);
  auto in = testing::random_inputs(c.length, torch::kDouble, 23);
  in.q = in.q * 3;
  torch::NoGradGuard no_grad;
  using Path = StaticDecodeLayer::Path;
  const auto fused = static_decode_all(*module, c, in, Path::kFused);
  const auto composed = static_decode_all(*module, c, in, Path::kComposed);
  EXPECT_LT((fused - composed).abs().max().item<double>(), 1e-12);
}

TEST_P(DecodeTest, RefusesAStepPastTheEnd) {
  const Case& c = GetParam();
  auto module = make_attention(c.options(), c.length, testing::kDim);
  auto in = testing::random_inputs(c.length, torch::kFloat, 22);
  torch::NoGradGuard no_grad;
  auto state = module->start_decoding(c.length);
  for (int64_t i = 0; i < c.length; ++i)
    state->step(in.q.select(2, i), in.k.select(2, i), in.v.select(2, i));
  EXPECT_THROW(state->step(in.q.select(2, 0), in.k.select(2, 0), in.v.select(2, 0)), c10::Error);
}

INSTANTIATE_TEST_SUITE_P(AllVariants,
                         DecodeTest,
                         ::testing::ValuesIn(testing::all_cases()),
                         [](const auto& info) { return testing::case_name(info.param); });

}  // namespace
}  // namespace combiner::attention
