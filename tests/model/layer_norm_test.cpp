// The model's LayerNorm (model/layer_norm.h): torch::nn::LayerNorm's parameters and function on
// every path, the fused op's output in bf16 under bf16 autocast (what the matmul after it reads),
// LibTorch's where the kernels do not take the width.
#include <gtest/gtest.h>

#include "model/layer_norm.h"
#include "model/precision.h"

namespace combiner::model {
namespace {

LayerNorm norm_with_weights(int64_t width) {
  LayerNorm norm(width);
  torch::NoGradGuard no_grad;
  torch::manual_seed(8);
  norm->weight.normal_(1.0, 0.3);
  norm->bias.normal_(0.0, 0.1);
  return norm;
}

TEST(ModelLayerNorm, ParametersAreTorchNnLayerNorms) {
  LayerNorm ours(64);
  torch::nn::LayerNorm theirs(torch::nn::LayerNormOptions({64}));
  std::vector<std::string> names, expected;
  for (const auto& p : ours->named_parameters()) names.push_back(p.key());
  for (const auto& p : theirs->named_parameters()) expected.push_back(p.key());
  EXPECT_EQ(names, expected);  // checkpoints name them alike
  EXPECT_TRUE(torch::equal(ours->weight, theirs->weight));
  EXPECT_TRUE(torch::equal(ours->bias, theirs->bias));
}

TEST(ModelLayerNorm, EveryPathIsLayerNormAndFusedWritesBf16UnderAutocast) {
  auto norm = norm_with_weights(64);
  torch::manual_seed(9);
  const auto x = torch::randn({5, 7, 64}) * 3 + 1;
  const auto want = torch::layer_norm(x, {64}, norm->weight, norm->bias, 1e-5);
  for (const auto path :
       {LayerNormImpl::Path::kAuto, LayerNormImpl::Path::kComposed, LayerNormImpl::Path::kFused}) {
    norm->set_path(path);
    const auto y = norm->forward(x);
    EXPECT_EQ(y.scalar_type(), torch::kFloat);
    EXPECT_LT((y - want).abs().max().item<double>(), 2e-5);
  }
  const AutocastGuard autocast(true, torch::kCPU);
  norm->set_path(LayerNormImpl::Path::kFused);
  const auto fused = norm->forward(x);
  EXPECT_EQ(fused.scalar_type(), torch::kBFloat16) << "no cast left for the matmul after it";
  EXPECT_TRUE(torch::allclose(fused.to(torch::kFloat), want, 1e-2, 1e-2));
  norm->set_path(LayerNormImpl::Path::kComposed);
  EXPECT_EQ(norm->forward(x).scalar_type(), torch::kFloat);  // LibTorch's, as autocast runs it
  norm->set_path(LayerNormImpl::Path::kAuto);                // on the CPU: LibTorch's
  EXPECT_EQ(norm->forward(x).scalar_type(), torch::kFloat);
}

TEST(ModelLayerNorm, AWidthTheKernelsDoNotTakeRunsLibTorchs) {
  auto norm = norm_with_weights(48);
  norm->set_path(LayerNormImpl::Path::kFused);
  const auto x = torch::randn({3, 48});
  const AutocastGuard autocast(true, torch::kCPU);
  const auto y = norm->forward(x);
  EXPECT_EQ(y.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(y, torch::layer_norm(x, {48}, norm->weight, norm->bias, 1e-5)));
}

// add_forward(x, r) = (x + r, forward(x + r)) on every path, the fused one in the norm's passes;
// under autocast with a bf16 residual (a matmul's output), the fused norm's output bf16 too.
TEST(ModelLayerNorm, AddForwardIsTheAddThenTheNorm) {
  auto norm = norm_with_weights(64);
  torch::manual_seed(10);
  const auto x = torch::randn({3, 5, 64}) * 2;
  for (const auto residual_type : {torch::kFloat, torch::kBFloat16}) {
    const auto r = torch::randn({3, 5, 64}).to(residual_type);
    for (const auto path : {LayerNormImpl::Path::kAuto,
                            LayerNormImpl::Path::kComposed,
                            LayerNormImpl::Path::kFused}) {
      norm->set_path(path);
      for (const bool autocast : {false, true}) {
        const AutocastGuard guard(autocast, torch::kCPU);
        const auto [h, y] = norm->add_forward(x, r);
        const auto h_want = x + r;
        const auto y_want = norm->forward(h_want);
        EXPECT_TRUE(torch::equal(h, h_want)) << int(path) << " " << autocast;
        EXPECT_EQ(y.scalar_type(), y_want.scalar_type()) << int(path) << " " << autocast;
        EXPECT_TRUE(torch::equal(y, y_want)) << int(path) << " " << autocast;
      }
    }
  }
}

}  // namespace
}  // namespace combiner::model
