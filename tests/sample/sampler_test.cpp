// Sampling: the cached and plain paths draw the same images from the same seed for every
// variant; argmax sampling is deterministic; bad options are refused.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "sample/sampler.h"

namespace combiner::sample {
namespace {

model::ImageTransformer tiny_model(const std::string& type) {
  model::TransformerOptions o;
  o.layers = 2;
  o.width = 16;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {3, 4, 2};  // L = 24, one row = 8 subpixels
  o.attention = {type, 4, 8, "deepsets-max"};
  torch::manual_seed(5);
  model::ImageTransformer model(o);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters())
    if (p.dim() >= 2) p.normal_(0.0, 0.3);  // peaked predictions, so images differ visibly
  return model;
}

class SamplerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SamplerTest, CachedAndPlainDrawTheSameImages) {
  auto model = tiny_model(GetParam());
  SampleOptions options;
  options.count = 3;
  options.seed = 11;
  auto cached = sample_images(model, options);
  options.cache = false;
  auto plain = sample_images(model, options);
  EXPECT_EQ(cached.sizes(), (std::vector<int64_t>{3, 3, 4, 2}));
  EXPECT_EQ(cached.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(cached, plain));
  EXPECT_GT(cached.to(torch::kFloat).std().item<double>(), 1.0);  // not a constant image
}

TEST_P(SamplerTest, BothCachedDecodersDrawTheSameImages) {
  auto model = tiny_model(GetParam());
  SampleOptions options;
  options.count = 3;
  options.seed = 11;
  std::vector<std::string> used;
  options.on_decoder = [&](const std::string& decoder) { used.push_back(decoder); };
  auto automatic = sample_images(model, options);  // the CPU's default: dynamic
  options.decoder = SampleOptions::Decoder::kStatic;
  auto fixed_shapes = sample_images(model, options);
  options.decoder = SampleOptions::Decoder::kDynamic;
  auto dynamic = sample_images(model, options);
  EXPECT_TRUE(torch::equal(fixed_shapes, dynamic));
  EXPECT_TRUE(torch::equal(automatic, dynamic));
  EXPECT_EQ(used, (std::vector<std::string>{"dynamic", "static", "dynamic"}));
}

TEST(SamplerOptionsTest, ParsesTheDecoderOrNamesTheKey) {
  EXPECT_EQ(parse_decoder("static", "--decoder"), SampleOptions::Decoder::kStatic);
  EXPECT_EQ(parse_decoder("auto", "--decoder"), SampleOptions::Decoder::kAuto);
  try {
    parse_decoder("graph", "--decoder");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--decoder: expected auto, dynamic or static, got 'graph'");
  }
}

// bfloat16 caches are the static decoder's: auto picks it for them, and the dynamic decoder and
// the plain path refuse them in one line.
TEST(Sampler, BFloat16CachesTakeTheStaticDecoder) {
  auto model = tiny_model("combiner-axial-vertical");
  SampleOptions options;
  options.count = 2;
  options.bfloat16_cache = true;
  std::vector<std::string> used;
  options.on_decoder = [&](const std::string& decoder) { used.push_back(decoder); };
  const auto images = sample_images(model, options);
  EXPECT_EQ(used, (std::vector<std::string>{"static, bfloat16 caches"}));
  EXPECT_EQ(images.size(0), 2);
  EXPECT_GT(images.to(torch::kFloat).std().item<double>(), 1.0);
  options.decoder = SampleOptions::Decoder::kDynamic;
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
  options.decoder = SampleOptions::Decoder::kAuto;
  options.cache = false;
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
  EXPECT_TRUE(parse_cache_dtype("bfloat16", "--cache-dtype"));
  EXPECT_FALSE(parse_cache_dtype("float32", "--cache-dtype"));
  try {
    parse_cache_dtype("fp16", "--cache-dtype");
    FAIL() << "no throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--cache-dtype: expected float32 or bfloat16, got 'fp16'");
  }
}

TEST_P(SamplerTest, ArgmaxIsDeterministicAndIgnoresTheSeed) {
  auto model = tiny_model(GetParam());
  SampleOptions options;
  options.count = 2;
  options.temperature = 0.0;
  options.seed = 1;
  auto first = sample_images(model, options);
  options.seed = 2;
  options.batch = 1;
  EXPECT_TRUE(torch::equal(first, sample_images(model, options)));
  options.cache = false;
  EXPECT_TRUE(torch::equal(first, sample_images(model, options)));
}

INSTANTIATE_TEST_SUITE_P(AllVariants,
                         SamplerTest,
                         ::testing::ValuesIn(attention::variant_names()),
                         [](const auto& info) {
                           std::string out = info.param;
                           for (auto& ch : out)
                             if (ch == '-') ch = '_';
                           return out;
                         });

TEST(Sampler, SeedsChangeImages) {
  auto model = tiny_model("combiner-axial-rowmajor");
  SampleOptions options;
  options.count = 2;
  auto first = sample_images(model, options);
  options.seed = 1;
  EXPECT_FALSE(torch::equal(first, sample_images(model, options)));
}

TEST(Sampler, RefusesBadOptions) {
  auto model = tiny_model("full");
  SampleOptions options;
  options.count = 0;
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
  options.count = 1;
  options.temperature = -0.5;
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
  options.temperature = std::nan("");
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
  options.temperature = 1.0;
  options.batch = -1;
  EXPECT_THROW(sample_images(model, options), std::invalid_argument);
}

// 5-bit data (vocab 32): every drawn subpixel is below 32, cached and plain alike, and the grids
// stretch 0..31 to 0..255.
TEST(Sampler, NBitModelsDrawBelowTheirVocabularyAndDisplayStretched) {
  model::TransformerOptions o;
  o.layers = 1;
  o.width = 16;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {3, 4, 2};
  o.vocab = 32;
  o.attention = {"combiner-axial-rowmajor", 8, 8, "max"};
  torch::manual_seed(6);
  model::ImageTransformer model(o);
  SampleOptions options;
  options.count = 4;
  auto cached = sample_images(model, options);
  options.cache = false;
  EXPECT_TRUE(torch::equal(cached, sample_images(model, options)));
  EXPECT_LT(cached.max().item<int64_t>(), 32);
  const auto shown = for_display(torch::tensor({0, 1, 16, 31}, torch::kByte), 32);
  EXPECT_TRUE(torch::equal(shown, torch::tensor({0, 8, 132, 255}, torch::kByte)));
  EXPECT_TRUE(torch::equal(for_display(cached, 256), cached));
}

}  // namespace
}  // namespace combiner::sample
