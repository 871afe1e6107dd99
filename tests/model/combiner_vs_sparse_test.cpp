// Full attention in one layer: a one-layer model with a Combiner variant reacts to a token its
// sparse counterpart cannot see in one layer, and the sparse model does not. The positions come
// from the plans (attention/plan.h), so every checked pair is really outside the sparse support.
#include <gtest/gtest.h>

#include <algorithm>

#include "attention/plan.h"
#include "model/transformer.h"

namespace combiner::model {
namespace {

constexpr int64_t kSide = 6;  // 6 x 6 grey images: L = 36
constexpr int64_t kLength = kSide * kSide;
constexpr int64_t kLayout = kSide;  // block s = row length W = one image row

ImageTransformer one_layer(const std::string& attention) {
  TransformerOptions o;
  o.layers = 1;
  o.width = 32;
  o.heads = 4;
  o.mlp_ratio = 2;
  o.image = {kSide, kSide, 1};
  o.attention.type = attention;
  o.attention.block = kLayout;
  o.attention.row_len = kLayout;
  torch::manual_seed(0);
  return ImageTransformer(o);
}

// Whether input position j is in the one-layer support S_i of the sparse variant.
bool sparse_sees(const std::string& sparse, int64_t i, int64_t j) {
  const auto plan = attention::plan_position(sparse, i, kLength, kLayout, kLayout);
  return std::binary_search(plan.direct.begin(), plan.direct.end(), j);
}

// Per position i: max |logits_i(x) - logits_i(x')| where x' changes the token that is the input
// at position j (that is x_{j-1}).
std::vector<double> logit_changes(ImageTransformer& model, const torch::Tensor& x, int64_t j) {
  torch::NoGradGuard no_grad;
  auto changed = x.clone();
  changed[0][j - 1] = (x[0][j - 1].item<int64_t>() + 128) % 256;
  const auto diff = (model->forward(x) - model->forward(changed)).abs().amax(-1)[0];
  return std::vector<double>(diff.data_ptr<float>(), diff.data_ptr<float>() + kLength);
}

struct Pair {
  std::string sparse, combiner;
};

class CombinerVsSparse : public ::testing::TestWithParam<Pair> {};

TEST_P(CombinerVsSparse, CombinerSeesWhatTheSparseLayerCannot) {
  const auto& [sparse_name, combiner_name] = GetParam();
  auto sparse = one_layer(sparse_name);
  auto combiner = one_layer(combiner_name);
  sparse->eval();
  combiner->eval();
  torch::manual_seed(1);
  const auto x = torch::randint(0, 256, {1, kLength}, torch::kLong);
  int64_t hidden_pairs = 0;
  double smallest_combiner_change = 1e9;
  for (int64_t j = 1; j < kLength; ++j) {
    const auto sparse_change = logit_changes(sparse, x, j);
    const auto combiner_change = logit_changes(combiner, x, j);
    for (int64_t i = 0; i < kLength; ++i) {
      if (i < j) {  // causal for both
        EXPECT_EQ(sparse_change[i], 0.0) << sparse_name << " i=" << i << " j=" << j;
        EXPECT_EQ(combiner_change[i], 0.0) << combiner_name << " i=" << i << " j=" << j;
        continue;
      }
      // Every j <= i reaches i through Combiner's direct set or one of its spans.
      EXPECT_GT(combiner_change[i], 1e-6) << combiner_name << " i=" << i << " j=" << j;
      if (sparse_sees(sparse_name, i, j)) continue;
      ++hidden_pairs;
      smallest_combiner_change = std::min(smallest_combiner_change, combiner_change[i]);
      EXPECT_EQ(sparse_change[i], 0.0) << sparse_name << " i=" << i << " j=" << j;
    }
  }
  // The layout leaves plenty of positions outside each sparse support.
  EXPECT_GT(hidden_pairs, kLength) << sparse_name;
  EXPECT_GT(smallest_combiner_change, 1e-6) << combiner_name;
}

INSTANTIATE_TEST_SUITE_P(Pairs,
                         CombinerVsSparse,
                         ::testing::Values(Pair{"fixed", "combiner-fixed"},
                                           Pair{"logsparse", "combiner-logsparse"},
                                           Pair{"axial", "combiner-axial-vertical"},
                                           Pair{"axial", "combiner-axial-horizontal"},
                                           Pair{"axial", "combiner-axial-rowmajor"},
                                           Pair{"axial", "combiner-mixture"}),
                         [](const auto& info) {
                           std::string name = info.param.combiner;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace combiner::model
