// Activation checkpointing changes neither the loss nor any gradient (dropout on, so the
// recomputation must replay the same masks); bf16 autocast stays close to fp32.
#include <gtest/gtest.h>

#include "model/transformer.h"

namespace combiner::model {
namespace {

TransformerOptions options(bool checkpointing, bool bfloat16) {
  TransformerOptions o;
  o.layers = 3;
  o.width = 32;
  o.heads = 4;
  o.mlp_ratio = 2;
  o.dropout = 0.2;
  o.image = {4, 4, 3};
  o.attention = {"combiner-axial-vertical", 12, 12, "deepsets-max"};
  o.activation_checkpointing = checkpointing;
  o.bfloat16 = bfloat16;
  return o;
}

struct LossAndGrads {
  double loss;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

LossAndGrads run(const TransformerOptions& o, const torch::Tensor& x) {
  torch::manual_seed(1);  // same weights
  ImageTransformer model(o);
  model->train();
  torch::manual_seed(2);  // same dropout masks
  auto logits = model->forward(x);
  auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), x.reshape({-1}));
  loss.backward();
  LossAndGrads out{loss.item<double>(), {}};
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key();
    out.grads.emplace_back(p.key(), p.value().grad().clone());
  }
  return out;
}

torch::Tensor tokens() {
  torch::manual_seed(3);
  return torch::randint(0, 256, {2, 48}, torch::kLong);
}

TEST(ActivationCheckpointing, SameLossAndGradients) {
  for (bool bf16 : {false, true}) {
    auto plain = run(options(false, bf16), tokens());
    auto recomputed = run(options(true, bf16), tokens());
    EXPECT_DOUBLE_EQ(plain.loss, recomputed.loss) << "bf16 " << bf16;
    ASSERT_EQ(plain.grads.size(), recomputed.grads.size());
    for (size_t i = 0; i < plain.grads.size(); ++i)
      EXPECT_TRUE(torch::allclose(plain.grads[i].second, recomputed.grads[i].second, 1e-5, 1e-7))
          << plain.grads[i].first << " bf16 " << bf16;
  }
}

TEST(ActivationCheckpointing, OffWithoutGradients) {
  ImageTransformer model(options(true, false));
  torch::NoGradGuard no_grad;
  auto logits = model->forward(tokens());
  EXPECT_FALSE(logits.requires_grad());
}

TEST(Bfloat16, CloseToFloat32AndLogitsStayFloat32) {
  auto x = tokens();
  torch::manual_seed(1);
  ImageTransformer model(options(false, false));
  model->eval();
  torch::NoGradGuard no_grad;
  auto fp32 = model->forward(x);
  auto o = options(false, true);
  torch::manual_seed(1);
  ImageTransformer bf16_model(o);
  bf16_model->eval();
  auto bf16 = bf16_model->forward(x);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat);
  for (const auto& p : bf16_model->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
  const double diff = (bf16 - fp32).abs().max().item<double>();
  EXPECT_GT(diff, 0.0);   // bf16 math did run
  EXPECT_LT(diff, 0.05);  // logits of magnitude ~1 agree to bf16's ~3 significant digits
}

}  // namespace
}  // namespace combiner::model
