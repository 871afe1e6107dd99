// Every preset in configs/ loads and validates, and the ablation presets differ from their
// `full` counterpart only in the attention type and the run folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "attention/attention.h"
#include "config/config.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> presets() {
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(fs::path(COMBINER_SOURCE_DIR) / "configs"))
    if (entry.path().extension() == ".yaml") out.push_back(entry.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Presets, EveryConfigLoadsAndValidates) {
  const auto files = presets();
  EXPECT_GE(files.size(), 35u);
  for (const auto& file : files) {
    SCOPED_TRACE(file);
    EXPECT_NO_THROW(config::load_config(file));
  }
}

TEST(Presets, EachVariantHasAnAblationPresetPerDataset) {
  const std::string dir = std::string(COMBINER_SOURCE_DIR) + "/configs/";
  const std::vector<std::pair<std::string, std::string>> bases = {
      {"cifar10_ablation_", "cifar10_ablation_full.yaml"},
      {"imagenet64_ablation_", "imagenet64_ablation_full.yaml"},
      {"fashion_mnist_", "fashion_mnist.yaml"}};
  for (const auto& variant : attention::variant_names()) {
    std::string stem = variant;
    std::replace(stem.begin(), stem.end(), '-', '_');
    for (const auto& [prefix, base_file] : bases) {
      const std::string file = dir + prefix + stem + ".yaml";
      SCOPED_TRACE(file);
      ASSERT_TRUE(fs::exists(file));
      auto preset = config::load_config(file);
      auto base = config::load_config(dir + base_file);
      EXPECT_EQ(preset.model.attention.type, variant);
      if (file != dir + base_file) {
        EXPECT_NE(preset.train.out_dir, base.train.out_dir);
      }
      // Same everything else: copy the two fields that may differ and compare the YAML.
      preset.model.attention.type = base.model.attention.type;
      preset.train.out_dir = base.train.out_dir;
      EXPECT_EQ(config::to_yaml(preset), config::to_yaml(base))
          << "the preset drifted from " << base_file << ": copy it again, changing only "
          << "model.attention.type and train.out_dir";
    }
  }
}

// The long-sequence pair for your own images: 128 x 128 x 3 from the config (no data needed to
// validate), Combiner against its full twin, nothing else different.
TEST(Presets, Images128PairDiffersOnlyInAttention) {
  const std::string dir = std::string(COMBINER_SOURCE_DIR) + "/configs/";
  auto ours = config::load_config(dir + "images128_combiner_axial.yaml");
  auto full = config::load_config(dir + "images128_full.yaml");
  EXPECT_EQ(ours.data.dataset, "images");
  EXPECT_EQ(ours.data.height * ours.data.width * ours.data.channels, 49152);
  EXPECT_EQ(ours.model.attention.type, "combiner-axial-rowmajor");
  EXPECT_EQ(full.model.attention.type, "full");
  ours.model.attention.type = full.model.attention.type;
  ours.train.out_dir = full.train.out_dir;
  EXPECT_EQ(config::to_yaml(ours), config::to_yaml(full));
}

}  // namespace
}  // namespace combiner
