// The transformer's contract: shapes, the shift-by-one input, and causality through the whole
// network (changing x_k changes no prediction at positions <= k).
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "model/precision.h"
#include "model/transformer.h"
#include "ops/cross_entropy.h"
#include "ops/weight_cast.h"
#include "ops/weight_cast_kernel.h"

namespace combiner::model {
namespace {

TransformerOptions tiny_options(const std::string& attention) {
  TransformerOptions o;
  o.layers = 2;
  o.width = 32;
  o.heads = 4;
  o.mlp_ratio = 2;
  o.image = {4, 4, 3};  // L = 48, one row = 12 subpixels
  o.attention.type = attention;
  o.attention.block = 12;
  o.attention.row_len = 12;
  return o;
}

// Sets each path on a two-layer model of `variant`; the logits of composed and fused agree.
void expect_paths_agree(const std::string& variant) {
  ImageTransformer model(tiny_options(variant));
  model->eval();
  auto x = torch::randint(0, 256, {2, 36}, torch::kByte);
  std::vector<torch::Tensor> logits;
  for (const auto& [path, expected] :
       std::vector<std::pair<std::string, attention::AttentionImpl::Path>>{
           {"composed", attention::AttentionImpl::Path::kComposed},
           {"fused", attention::AttentionImpl::Path::kFused},
           {"auto", attention::AttentionImpl::Path::kAuto}}) {
    set_kernel_path(*model, path);
    int layers = 0;
    for (const auto& module : model->modules())
      if (auto* layer = dynamic_cast<attention::AttentionImpl*>(module.get())) {
        EXPECT_EQ(layer->path(), expected) << path;
        ++layers;
      }
    EXPECT_EQ(layers, 2) << path;
    int norms = 0;  // two a block and the final one, on the same path
    for (const auto& module : model->modules())
      if (auto* norm = dynamic_cast<LayerNormImpl*>(module.get())) {
        EXPECT_EQ(int(norm->path()), int(expected)) << path;
        ++norms;
      }
    EXPECT_EQ(norms, 5) << path;
    torch::NoGradGuard no_grad;
    logits.push_back(model->forward(x));
  }
  EXPECT_LT((logits[0] - logits[1]).abs().max().item<double>(), 1e-4);
}

// Block::forward (the first residual add done in ln_mlp's pass over its sum) is its two halves,
// attention_half then mlp_half (what recompute_mlp runs), to the bit on the fused path and the
// composed one, outputs and every gradient, in float32 and under bf16 autocast.
TEST(Transformer, BlockForwardIsItsTwoHalves) {
  auto o = tiny_options("combiner-axial-vertical");
  o.dropout = 0;
  for (const std::string path : {"composed", "fused"})
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(path + (bf16 ? " bf16" : " fp32"));
      torch::manual_seed(4);
      Block block(o);
      set_kernel_path(*block, path);
      const auto x = torch::randn({2, 36, o.width});
      auto run = [&](bool halves) {
        block->zero_grad();
        auto xx = x.clone().requires_grad_();
        torch::Tensor y;
        {
          AutocastGuard autocast(bf16, torch::kCPU);
          y = halves ? block->mlp_half(block->attention_half(xx)) : block->forward(xx);
        }
        y.sum().backward();
        std::vector<torch::Tensor> out = {y.detach(), xx.grad()};
        for (const auto& p : block->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto whole = run(false), halves = run(true);
      ASSERT_EQ(whole.size(), halves.size());
      for (size_t i = 0; i < whole.size(); ++i)
        EXPECT_TRUE(torch::equal(whole[i], halves[i])) << "tensor " << i;
    }
}

// train.attention_path reaches every attention layer and LayerNorm; the fused path (the kernels'
// CPU models; for `full`, SDPA's CPU kernel where LibTorch has one) gives the composed path's
// logits.
TEST(Transformer, AttentionPathReachesEveryLayer) {
  for (const std::string variant : {"combiner-axial-vertical", "full"}) {
    SCOPED_TRACE(variant);
    expect_paths_agree(variant);
  }
}

// The loss follows train.attention_path: on the fused path the loss kernels (their CPU model
// here) give the composed path's mean bits, subpixel bits and every parameter's gradient, and
// both are the bits of forward's logits.
TEST(Transformer, LossFollowsThePathAndIsTheLogitsBits) {
  ImageTransformer model(tiny_options("combiner-axial-rowmajor"));
  model->eval();  // no dropout: the two runs see the same network
  const auto x = torch::randint(0, 256, {2, 48}, torch::kByte);
  std::vector<std::vector<torch::Tensor>> runs;
  for (const std::string path : {"composed", "fused"}) {
    set_kernel_path(*model, path);
    model->zero_grad();
    const int64_t before = ops::cross_entropy_launches();
    const auto loss = model->mean_bits(x);
    loss.backward();
    EXPECT_EQ(ops::cross_entropy_launches() - before, path == "fused" ? 2 : 0) << path;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> run = {loss.detach(), model->subpixel_bits(x)};
    for (const auto& p : model->parameters()) run.push_back(p.grad().clone());
    runs.push_back(run);
  }
  torch::NoGradGuard no_grad;
  const auto reference = ops::cross_entropy_bits_composed(model->forward(x), x, false);
  EXPECT_LT((runs[1][1] - reference).abs().max().item<double>(), 1e-5);
  EXPECT_NEAR(runs[1][0].item<double>(), reference.mean().item<double>(), 1e-5);
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_LT((runs[0][i] - runs[1][i]).abs().max().item<double>(), 1e-5) << "tensor " << i;
}

// Under bf16 autocast on the fused path a forward with a gradient writes every block linear
// layer's bf16 weight and bias in one launch, and each layer reads them: a block's layers cast
// nothing (launches: tools/launch_count's test). After the parameters change, the next forward
// reads them as they are then: the loss a fresh model with those parameters gives.
TEST(Transformer, Bf16ForwardWritesTheWeightCopiesInOneLaunch) {
  auto options = tiny_options("combiner-axial-rowmajor");
  options.bfloat16 = true;
  auto make = [&] {
    torch::manual_seed(21);
    ImageTransformer model(options);
    model->eval();  // no dropout
    set_kernel_path(*model, "fused");
    return model;
  };
  auto model = make();
  const auto x = torch::randint(0, 256, {2, 48}, torch::kByte);
  const int64_t before = ops::weight_cast_launches();
  const auto first = model->mean_bits(x);
  first.backward();
  EXPECT_EQ(ops::weight_cast_launches() - before, ops::kWeightCastLaunches);
  {
    torch::NoGradGuard no_grad;
    EXPECT_EQ(ops::weight_cast_launches() - before, ops::kWeightCastLaunches);
    for (auto& p : model->parameters()) p.mul_(1.5);
  }
  const auto second = model->mean_bits(x);
  auto fresh = make();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : fresh->parameters()) p.mul_(1.5);
  }
  EXPECT_NE(second.item<float>(), first.item<float>());
  EXPECT_EQ(second.item<float>(), fresh->mean_bits(x).item<float>());
  // Without a gradient (evaluation) the layers are LibTorch's: nothing written.
  torch::NoGradGuard no_grad;
  const int64_t after = ops::weight_cast_launches();
  model->mean_bits(x);
  EXPECT_EQ(ops::weight_cast_launches(), after);
}

// A bf16 step on the CPU, on either path, is the float32 step to bf16's rounding: the loss and
// every parameter's gradient close to float32's. (LibTorch 1.13's CPU bf16 matmul sums in bf16:
// over these 6,144 tokens the composed path's weight gradients were up to a tenth off.)
TEST(Transformer, Bf16StepOnTheCpuIsTheFloat32StepRounded) {
  const auto x = torch::randint(0, 256, {128, 48}, torch::kByte);
  auto step = [&](const std::string& path, bool bf16) {
    auto options = tiny_options("combiner-axial-rowmajor");
    options.bfloat16 = bf16;
    torch::manual_seed(22);
    ImageTransformer model(options);
    model->eval();  // no dropout
    set_kernel_path(*model, path);
    auto loss = model->mean_bits(x);
    loss.backward();
    std::vector<torch::Tensor> out = {loss.detach()};
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto want = step("composed", false);
  for (const std::string path : {"composed", "fused"}) {
    SCOPED_TRACE(path);
    const auto got = step(path, true);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_NEAR(got[0].item<double>(), want[0].item<double>(), 2e-3 * want[0].item<double>());
    for (size_t i = 1; i < got.size(); ++i) {
      const double scale = want[i].norm().item<double>();
      EXPECT_LT((got[i] - want[i]).norm().item<double>(), 0.03 * scale) << "parameter " << i;
    }
  }
}

TEST(Transformer, LogitsShapeAndDtype) {
  torch::manual_seed(0);
  ImageTransformer model(tiny_options("full"));
  auto x = torch::randint(0, 256, {3, 48}, torch::kLong);
  auto logits = model->forward(x);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{3, 48, 256}));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat);
}

TEST(Transformer, InputTokensShiftRightWithStartToken) {
  auto x = torch::tensor({{5, 6, 7}, {1, 2, 3}}, torch::kLong);
  auto tokens = input_tokens(x);
  auto expected = torch::tensor({{kStartToken, 5L, 6L}, {kStartToken, 1L, 2L}}, torch::kLong);
  EXPECT_TRUE(torch::equal(tokens, expected));
}

TEST(Transformer, ChangingOneSubpixelChangesOnlyLaterPredictions) {
  torch::manual_seed(1);
  ImageTransformer model(tiny_options("full"));
  model->eval();
  auto x = torch::randint(0, 256, {1, 48}, torch::kLong);
  auto base = model->forward(x);
  for (int64_t k : {0, 7, 20, 46}) {
    auto changed = x.clone();
    changed[0][k] = (changed[0][k].item<int64_t>() + 128) % 256;
    auto out = model->forward(changed);
    auto diff = (out - base).abs().amax(-1)[0];  // [L]
    EXPECT_EQ(diff.narrow(0, 0, k + 1).max().item<float>(), 0.0f) << "k = " << k;
    EXPECT_GT(diff.narrow(0, k + 1, 48 - k - 1).max().item<float>(), 0.0f) << "k = " << k;
  }
}

TEST(Transformer, PrefixForwardMatchesFullForward) {
  // The plain sampler runs the network on prefixes: they must give the same logits.
  torch::manual_seed(2);
  ImageTransformer model(tiny_options("full"));
  model->eval();
  auto x = torch::randint(0, 256, {2, 48}, torch::kLong);
  auto full = model->forward(x);
  auto prefix = model->forward(x.narrow(1, 0, 24));
  EXPECT_LT((full.narrow(1, 0, 24) - prefix).abs().max().item<float>(), 1e-5f);
}

TEST(Transformer, ParameterCountMatchesArithmetic) {
  ImageTransformer model(tiny_options("full"));
  const int64_t W = 32, layers = 2, hidden = 64;
  const int64_t embeddings = (257 + 4 + 4 + 3) * W;
  const int64_t block =
      2 * 2 * W + (3 * W * W + 3 * W) + (W * W + W) + (W * hidden + hidden) + (hidden * W + W);
  const int64_t head = 2 * W + W * 256 + 256;
  EXPECT_EQ(parameter_count(*model), embeddings + layers * block + head);
}

}  // namespace
}  // namespace combiner::model

namespace combiner::model {
namespace {

// data.dataset: images at sizes the named datasets never have: the shape comes from the config
// (data.height/width/channels, as resolved from a packed header), the attention's block and
// row length default to one image row, and the network is causal at every size.
TEST(Transformer, AnyImageShapeFromTheConfig) {
  for (const data::ImageShape shape :
       {data::ImageShape{1, 1, 1}, data::ImageShape{17, 23, 3}, data::ImageShape{128, 128, 3}}) {
    config::Config c;
    c.data.dataset = "images";
    c.data.height = shape.height;
    c.data.width = shape.width;
    c.data.channels = shape.channels;
    c.model.layers = 1;
    c.model.width = 16;
    c.model.heads = 2;
    c.model.mlp_ratio = 2;
    c.model.attention.type = "combiner-axial-rowmajor";
    config::validate(c);
    EXPECT_EQ(c.model.attention.row_len, shape.width * shape.channels);
    torch::manual_seed(3);
    ImageTransformer model(TransformerOptions::from_config(c));
    model->eval();
    const int64_t L = shape.length();
    auto x = torch::randint(0, 256, {1, L}, torch::kLong);
    torch::NoGradGuard no_grad;
    auto base = model->forward(x);
    ASSERT_EQ(base.sizes(), (std::vector<int64_t>{1, L, 256}));
    const int64_t k = L / 2;  // a change at k reaches no prediction at positions <= k
    auto changed = x.clone();
    changed[0][k] = (changed[0][k].item<int64_t>() + 128) % 256;
    auto diff = (model->forward(changed) - base).abs().amax(-1)[0];
    EXPECT_EQ(diff.narrow(0, 0, k + 1).max().item<float>(), 0.0f) << shape.height;
    if (k + 1 < L) {
      EXPECT_GT(diff.narrow(0, k + 1, L - k - 1).max().item<float>(), 0.0f);
    }
  }
}

// data.bits 5: a 32-way head, and token 32 starts the sequence.
TEST(Transformer, VocabularyFollowsDataBits) {
  config::Config c;
  c.data.dataset = "images";
  c.data.height = 4;
  c.data.width = 4;
  c.data.channels = 3;
  c.data.bits = 5;
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.mlp_ratio = 2;
  c.model.attention.type = "full";
  config::validate(c);
  ImageTransformer model(TransformerOptions::from_config(c));
  EXPECT_EQ(model->options().vocab, 32);
  auto logits = model->forward(torch::randint(0, 32, {2, 48}, torch::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 48, 32}));
  EXPECT_EQ(input_tokens(torch::zeros({1, 3}, torch::kLong), 32)[0][0].item<int64_t>(), 32);
}

}  // namespace
}  // namespace combiner::model
