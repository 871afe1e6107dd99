// combiner-export's files read by the safetensors package itself (tests/python/
// safetensors_clients.py, in the venv's python): safetensors.torch and safetensors.numpy give the
// checkpoint's tensors bit for bit (bf16 rounded once) with the __metadata__ we document; a file
// that safetensors.torch.save_file writes from those tensors, with only our "config", evaluates
// in combiner-eval to the export's bits/dim. And docs/USAGE.md's __metadata__ list names every
// key the exporter writes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_binary.h"
#include "cli/tiny_config.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "util/json.h"
#include "util/npy.h"
#include "util/safetensors.h"
#include "venv_python.h"

namespace combiner {
namespace {

using combiner::testing::read_text;
using combiner::testing::run_binary;
using combiner::testing::run_venv_script;
using combiner::testing::TempDir;
using combiner::testing::tiny_config;

namespace fs = std::filesystem;

class SafetensorsClients : public ::testing::Test {
 protected:
  // A tiny trained model and its fp32 and bf16 exports, shared by the suite.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string config = tiny_config(*dir_);
    const auto trained = run_binary("combiner-train", "--config " + config);
    ASSERT_EQ(trained.status, 0) << trained.output;
    checkpoint_ = trained.last_line().substr(std::string("checkpoint: ").size());
    for (const std::string dtype : {"float32", "bfloat16"}) {
      const auto r = run_binary(
          "combiner-export",
          "--checkpoint " + checkpoint_ + " --out " + exported(dtype) + " --dtype " + dtype);
      ASSERT_EQ(r.status, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string exported(const std::string& dtype) {
    return dir_->file("model-" + dtype + ".safetensors");
  }
  // combiner-eval's last line ("val_bpd: ...") for a checkpoint or safetensors file.
  static std::string val_bpd(const std::string& path) {
    const auto r = run_binary("combiner-eval", "--checkpoint " + path + " --split val");
    EXPECT_EQ(r.status, 0) << r.output;
    return r.last_line();
  }
  static TempDir* dir_;
  static std::string checkpoint_;
};
TempDir* SafetensorsClients::dir_ = nullptr;
std::string SafetensorsClients::checkpoint_;

// The cases that run the safetensors package: a suite of their own, which skips without the
// venv's python (and then trains nothing).
class VenvSafetensorsClients : public SafetensorsClients {
 protected:
  static void SetUpTestSuite() {
    if (!combiner::testing::venv_python().empty()) SafetensorsClients::SetUpTestSuite();
  }
};

TEST_F(VenvSafetensorsClients, TorchAndNumpyLoadTheExportTensorForTensor) {
  if (combiner::testing::venv_python().empty()) GTEST_SKIP() << combiner::testing::kVenvMissing;
  const train::Checkpoint ckpt = train::load_checkpoint(checkpoint_);
  const std::string n = std::to_string(ckpt.model.size());
  const std::map<std::string, std::string> lines = {
      {"float32",
       "safetensors.torch ok " + n + " tensors torch.float32\nsafetensors.numpy ok " + n +
           " tensors float32\n"},
      {"bfloat16",
       "safetensors.torch ok " + n + " tensors torch.bfloat16\nsafetensors.numpy names-only " + n +
           " tensors\n"}};
  for (const auto& [dtype, expected_output] : lines) {
    // What the checkpoint holds, as the file must: names, values (rounded for bf16), metadata.
    const std::string expected = dir_->file("expected-" + dtype);
    fs::create_directories(expected);
    std::ofstream names(expected + "/names.txt");
    for (const auto& [name, tensor] : ckpt.model) {
      names << name << "\n";
      util::save_npy(expected + "/" + name + ".npy",
                     dtype == "float32" ? tensor : tensor.to(torch::kBFloat16).to(torch::kFloat));
    }
    names.close();
    std::ofstream(expected + "/metadata.json")
        << "{\"config\": " << util::json_quote(ckpt.config_yaml) << ", \"step\": \"" << ckpt.step
        << "\", \"weights\": \"model\", \"dtype\": \"" << dtype << "\", \"format\": \"pt\"}";
    const auto run =
        run_venv_script("safetensors_clients.py", "check " + exported(dtype) + " " + expected);
    EXPECT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(run.output, expected_output) << dtype;
  }
}

TEST_F(VenvSafetensorsClients, SaveFileOfOurTensorsEvaluatesLikeTheExport) {
  if (combiner::testing::venv_python().empty()) GTEST_SKIP() << combiner::testing::kVenvMissing;
  for (const std::string dtype : {"float32", "bfloat16"}) {
    const std::string resaved = dir_->file("resaved-" + dtype + ".safetensors");
    const auto run =
        run_venv_script("safetensors_clients.py", "resave " + exported(dtype) + " " + resaved);
    ASSERT_EQ(run.status, 0) << run.output;
    // Another writer's file: the same tensors, laid out its own way, metadata "config" alone.
    EXPECT_NE(read_text(resaved), read_text(exported(dtype)));
    const auto metadata = util::load_safetensors(resaved).metadata;
    EXPECT_EQ(metadata.size(), 1u);
    EXPECT_EQ(metadata.count("config"), 1u);
    const std::string ours = val_bpd(exported(dtype));
    ASSERT_EQ(ours.rfind("val_bpd: ", 0), 0u) << ours;
    EXPECT_EQ(val_bpd(resaved), ours) << dtype;
    if (dtype == "float32") {
      EXPECT_EQ(ours, val_bpd(checkpoint_));
    }
  }
}

TEST_F(SafetensorsClients, UsageListsEveryMetadataKeyTheExporterWrites) {
  // docs/USAGE.md's paragraph that introduces the exported file's __metadata__.
  const std::string readme = read_text(std::string(COMBINER_SOURCE_DIR) + "/docs/USAGE.md");
  const auto at = readme.find("`__metadata__`");
  ASSERT_NE(at, std::string::npos);
  const auto begin = readme.rfind("\n\n", at), end = readme.find("\n\n", at);
  const std::string paragraph = readme.substr(begin, end - begin);
  for (const std::string dtype : {"float32", "bfloat16"}) {
    const auto metadata = util::load_safetensors(exported(dtype)).metadata;
    ASSERT_EQ(metadata.at("dtype"), dtype);
    for (const auto& [key, value] : metadata)
      EXPECT_NE(paragraph.find("`" + key + "`"), std::string::npos)
          << "docs/USAGE.md's __metadata__ list lacks `" << key << "`: " << paragraph;
    EXPECT_NE(paragraph.find("`" + dtype + "`"), std::string::npos) << paragraph;
  }
}

}  // namespace
}  // namespace combiner
