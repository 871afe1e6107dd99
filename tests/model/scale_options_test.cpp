// Activation checkpointing, of whole blocks or of their MLP halves, changes neither the loss nor
// any gradient (dropout on, so the recomputation must replay the same masks); bf16 autocast stays
// close to fp32, on the composed and on the fused path.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "model/transformer.h"

namespace combiner::model {
namespace {

TransformerOptions options(bool checkpointing, bool bfloat16, bool recompute_mlp = false) {
  TransformerOptions o;
  o.layers = 3;
  o.width = 32;
  o.heads = 4;
  o.mlp_ratio = 2;
  o.dropout = 0.2;
  o.image = {4, 4, 3};
  o.attention = {"combiner-axial-vertical", 12, 12, "deepsets-max"};
  o.activation_checkpointing = checkpointing;
  o.recompute_mlp = recompute_mlp;
  o.bfloat16 = bfloat16;
  return o;
}

struct LossAndGrads {
  double loss;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

LossAndGrads run(const TransformerOptions& o,
                 const torch::Tensor& x,
                 const torch::Device& device = torch::kCPU,
                 const std::string& path = "auto") {
  torch::manual_seed(1);  // same weights
  ImageTransformer model(o);
  model->to(device);
  set_kernel_path(*model, path);
  model->train();
  torch::manual_seed(2);  // same dropout masks (on the CPU's generator or the GPU's)
  auto logits = model->forward(x);
  auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), x.reshape({-1}));
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key();
    out.grads.emplace_back(p.key(), p.value().grad().cpu());
  }
  return out;
}

torch::Tensor tokens() {
  torch::manual_seed(3);
  return torch::randint(0, 256, {2, 48}, torch::kLong);
}

// On both kernel paths: the fused one (the kernels' CPU models) adds the attention half's
// residual in the MLP half's LayerNorm, in the plain block and in the recomputed MLP half alike.
TEST(ActivationCheckpointing, SameLossAndGradients) {
  for (const std::string path : {"auto", "fused"})
    for (bool bf16 : {false, true}) {
      auto plain = run(options(false, bf16), tokens(), torch::kCPU, path);
      // Whole blocks; the MLP halves alone; both set (whole blocks win).
      for (auto [whole, mlp] : {std::pair{true, false}, {false, true}, {true, true}}) {
        auto recomputed = run(options(whole, bf16, mlp), tokens(), torch::kCPU, path);
        const std::string what = path + ", bf16 " + (bf16 ? "on" : "off") + ", whole blocks " +
                                 (whole ? "on" : "off") + ", MLP halves " + (mlp ? "on" : "off");
        EXPECT_DOUBLE_EQ(plain.loss, recomputed.loss) << what;
        ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
        for (size_t i = 0; i < plain.grads.size(); ++i)
          EXPECT_TRUE(
              torch::allclose(plain.grads[i].second, recomputed.grads[i].second, 1e-5, 1e-7))
              << plain.grads[i].first << ", " << what;
      }
    }
}

// On a GPU dropout draws from the CUDA generator: the recomputation must replay its masks too.
TEST(GpuActivationCheckpointing, SameLossAndGradientsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device cuda(torch::kCUDA);
  const auto x = tokens().to(cuda);
  auto plain = run(options(false, false), x, cuda);
  for (bool mlp : {false, true}) {
    auto recomputed = run(options(!mlp, false, mlp), x, cuda);
    EXPECT_NEAR(plain.loss, recomputed.loss, 1e-6) << "MLP halves only: " << mlp;
    ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_TRUE(torch::allclose(plain.grads[i].second, recomputed.grads[i].second, 1e-4, 1e-6))
          << plain.grads[i].first << ", MLP halves only: " << mlp;
  }
}

TEST(ActivationCheckpointing, OffWithoutGradients) {
  ImageTransformer model(options(true, false));
  torch::NoGradGuard no_grad;
  auto logits = model->forward(tokens());
  EXPECT_FALSE(logits.requires_grad());
}

// The same weights of N(0, 0.5) for every matrix, as decoder_test draws them: at the
// initialisation's small weights the logits spread only ~0.1, so any tolerance loose enough for
// bf16 would also pass a broken bf16 path.
ImageTransformer scaled_up(const TransformerOptions& o) {
  torch::manual_seed(1);
  ImageTransformer model(o);
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  for (auto& p : model->parameters())
    if (p.dim() >= 2) p.normal_(0.0, 0.5);
  model->eval();
  return model;
}

TEST(Bfloat16, CloseToFloat32AndLogitsStayFloat32) {
  auto x = tokens();
  torch::NoGradGuard no_grad;
  auto fp32 = scaled_up(options(false, false))->forward(x);
  auto bf16_model = scaled_up(options(false, true));
  auto bf16 = bf16_model->forward(x);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat);
  for (const auto& p : bf16_model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
  // Tolerances relative to the logits' spread (~2.9 here): bf16 rounds to ~3 significant digits,
  // and three blocks of large weights compound it to ~1.2% of the spread in RMS, ~8% at worst. A
  // bf16 path whose attention output is off by 20% lands at 18% RMS.
  const double spread = fp32.std().item<double>();
  const double rms = (bf16 - fp32).pow(2).mean().sqrt().item<double>();
  const double worst = (bf16 - fp32).abs().max().item<double>();
  EXPECT_GT(spread, 1.0);
  EXPECT_GT(worst, 0.0);  // bf16 math did run
  EXPECT_LT(rms, 0.03 * spread) << "worst " << worst << ", spread " << spread;
  EXPECT_LT(worst, 0.15 * spread) << "rms " << rms << ", spread " << spread;
}

// train.precision auto: float32 on the CPU, to the bit; on CUDA (where a GPU is at hand) the
// bf16 model's very logits.
TEST(Bfloat16, AutoIsFloat32OnTheCpuAndBfloat16OnCuda) {
  auto automatic = options(false, false);
  automatic.bfloat16_on_cuda = true;
  auto x = tokens();
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(scaled_up(automatic)->forward(x),
                           scaled_up(options(false, false))->forward(x)));
  EXPECT_FALSE(torch::equal(scaled_up(options(false, true))->forward(x),
                            scaled_up(options(false, false))->forward(x)));
  if (!torch::cuda::is_available()) return;
  const torch::Device cuda(torch::kCUDA);
  x = x.to(cuda);
  auto on_cuda = [&](const TransformerOptions& o) {
    auto model = scaled_up(o);
    model->to(cuda);
    return model->forward(x);
  };
  EXPECT_TRUE(torch::equal(on_cuda(automatic), on_cuda(options(false, true))));
}

// One bf16 training step on the fused path (the kernels' CPU models: attention, and LayerNorm
// writing bf16 for the matmuls) against the composed path in bf16 and in fp32: the loss and every
// gradient within what bf16 rounding moves them.
TEST(Bfloat16, FusedStepMatchesTheComposedOne) {
  const auto x = tokens();
  const auto fused = run(options(false, true), x, torch::kCPU, "fused");
  const auto composed = run(options(false, true), x, torch::kCPU, "composed");
  const auto fp32 = run(options(false, false), x, torch::kCPU, "composed");
  EXPECT_NEAR(fused.loss, composed.loss, 2e-3 * composed.loss);
  EXPECT_NEAR(fused.loss, fp32.loss, 5e-3 * fp32.loss);
  ASSERT_EQ(fused.grads.size(), composed.grads.size());
  for (size_t i = 0; i < fused.grads.size(); ++i) {
    const auto& [name, g] = fused.grads[i];
    const auto& want = fp32.grads[i].second;
    const double scale = std::max(want.abs().max().item<double>(), 1e-6);
    EXPECT_LT((g - want).abs().max().item<double>(), 0.1 * scale) << name;
    EXPECT_LT((composed.grads[i].second - want).abs().max().item<double>(), 0.1 * scale) << name;
  }
}

}  // namespace
}  // namespace combiner::model
