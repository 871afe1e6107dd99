// What one cached decode step launches, counted as a GPU would launch it (tools/launch_count.h):
// the static decoder's step, which a GPU replays as one CUDA graph, stays within the bound stated
// here per layer, and does so at every step (the same work whatever the position); a row start
// adds one span-summary launch per layer.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "model/decoder.h"
#include "model/static_decoder.h"
#include "tools/launch_count.h"

namespace combiner::tools {
namespace {

// The paths a GPU takes (attention and LayerNorm kernels; on the CPU their models).
model::ImageTransformer vertical_model(int64_t layers, const std::string& path = "fused") {
  model::TransformerOptions o;
  o.layers = layers;
  o.width = 32;  // a width the LayerNorm kernels take
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {4, 4, 3};  // L = 48, rows of 12
  o.attention = {"combiner-axial-vertical", 12, 12, "max"};
  torch::manual_seed(3);
  model::ImageTransformer model(o);
  model::set_kernel_path(*model, path);
  model->eval();
  return model;
}

std::string listing(const LaunchCounter& counter) {
  std::string out;
  for (const auto& [name, calls] : counter.ops()) out += " " + name + " x" + std::to_string(calls);
  return out;
}

// The launches of each step of a whole sequence, for either decoder.
template <typename Decoder>
std::vector<int64_t> launches_per_step(Decoder& decoder, int64_t batch, std::string* seen) {
  std::vector<int64_t> out;
  auto token = torch::zeros({batch}, torch::kLong);
  for (int64_t i = 0; i < 48; ++i) {
    const LaunchCounter counter;
    decoder.step(token);
    out.push_back(counter.launches());
    if (i == 20) *seen = listing(counter);
  }
  return out;
}

// Per layer and per step, what the static decoder's steady step launches (the step before a row
// start), with the kernel paths `path` sets.
std::pair<int64_t, int64_t> static_step_launches(const std::string& path) {
  std::vector<int64_t> steady;
  for (const int64_t layers : {1, 3}) {
    auto model = vertical_model(layers, path);
    model::StaticDecoder decoder(model, 2, /*capture=*/false);
    std::string seen;
    const auto counts = launches_per_step(decoder, 2, &seen);
    // Step 0 allocates (zero-fills) the caches; row starts (12, 24, 36) make the rows' column
    // summaries first, in one call each.
    for (int64_t i = 1; i < 48; ++i) {
      if (i % 12 == 0) continue;
      EXPECT_EQ(counts[i], counts[1]) << path << ", " << layers << " layers, step " << i;
    }
    for (int64_t i : {12, 24, 36}) EXPECT_GT(counts[i], counts[1]) << "step " << i;
    steady.push_back(counts[1]);
    if (layers == 3) std::cout << path << ": launches of step 20, 3 layers:" << seen << "\n";
  }
  const int64_t per_layer = (steady[1] - steady[0]) / 2, per_step = steady[0] - per_layer;
  std::cout << path << ": per layer " << per_layer << ", per step " << per_step << "\n";
  return {per_layer, per_step};
}

TEST(DecodeCount, StaticStepLaunchesTheSameWorkAtEveryPosition) {
  torch::NoGradGuard no_grad;
  // The bounds, what a step launches today on a GPU's paths, per layer: each LayerNorm with the
  // residual add before it and the projection after it (and the MLP's GELU) in one kernel, twice;
  // the attention step (cache writes, gathers, scores, softmax and sums in one kernel); the two
  // other projections. Once per step: the token and index buffers copied in, the embeddings, the
  // final LayerNorm and head, the logits out.
  constexpr int64_t kPerLayer = 5, kPerStep = 11;
  const auto [per_layer, per_step] = static_step_launches("fused");
  EXPECT_LE(per_layer, kPerLayer);
  EXPECT_LE(per_step, kPerStep);
  // The same step in LibTorch ops (the reference path): the attention step alone is a dozen.
  const auto composed = static_step_launches("composed");
  EXPECT_GE(composed.first, per_layer + 10);
}

// Per layer and per step, what a row start launches more than the step before it: the spans'
// summaries, made eagerly before the step (outside a captured graph).
std::pair<int64_t, int64_t> row_start_launches(const std::string& path) {
  std::vector<int64_t> extra;
  for (const int64_t layers : {1, 3}) {
    auto model = vertical_model(layers, path);
    model::StaticDecoder decoder(model, 2, /*capture=*/false);
    std::string seen;
    const auto counts = launches_per_step(decoder, 2, &seen);
    extra.push_back(counts[24] - counts[23]);
    EXPECT_EQ(counts[12] - counts[11], extra.back()) << path << ", " << layers << " layers";
  }
  const int64_t per_layer = (extra[1] - extra[0]) / 2, per_step = extra[0] - per_layer;
  std::cout << path << ": a row start's summaries, per layer " << per_layer << ", per step "
            << per_step << "\n";
  return {per_layer, per_step};
}

TEST(DecodeCount, ARowStartSummarisesEachLayersSpansInOneLaunch) {
  torch::NoGradGuard no_grad;
  // On a GPU's paths, each layer's W column spans are one span-summary kernel; once per row
  // start, the job's lists (slots, positions) are copied in.
  const auto [per_layer, per_step] = row_start_launches("fused");
  EXPECT_EQ(per_layer, 1);
  EXPECT_LE(per_step, 2);
  // In LibTorch ops: gathers, casts, pools, products, softmax, concatenation, table write.
  const auto composed = row_start_launches("composed");
  EXPECT_GE(composed.first, per_layer + 9);
  EXPECT_EQ(composed.second, per_step);
}

TEST(DecodeCount, DynamicStepLaunchesGrowWithThePrefix) {
  torch::NoGradGuard no_grad;
  auto model = vertical_model(3, "composed");
  model::Decoder decoder(model);
  std::string seen;
  const auto counts = launches_per_step(decoder, 2, &seen);
  EXPECT_GT(counts[13], counts[1]) << "a step past row 0 reads its column above and the spans";
}

}  // namespace
}  // namespace combiner::tools
