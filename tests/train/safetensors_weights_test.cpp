// combiner-export's library side: a trained tiny model exported as safetensors holds exactly the
// checkpoint's tensors (fp32 bit for bit, bf16 rounded once; Python with json + numpy alone
// agrees), load_model reads it back, an existing file is kept unless forced and a failed export
// leaves it whole, and a file that does not fit its config is refused naming the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "child_process.h"
#include "cli/run_binary.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/model_loading.h"
#include "train/safetensors_weights.h"
#include "train/tiny_run.h"
#include "train/trainer.h"
#include "util/npy.h"
#include "util/safetensors.h"

namespace combiner::train {
namespace {

using combiner::testing::expect_contains;
using combiner::testing::TempDir;

namespace fs = std::filesystem;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "NO ERROR";
}

class SafetensorsExport : public ::testing::Test {
 protected:
  // One trained tiny model with a moving average, shared by the suite.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto c = tiny_run(dir_->file("run"), 3);
    c.train.ema_decay = 0.9;
    checkpoint_ = new std::string(run_training(c, {}).final_checkpoint);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete checkpoint_;
  }
  std::string exported(const std::string& name, const ExportOptions& options = {}) {
    const std::string path = dir_->file(name);
    export_safetensors(*checkpoint_, path, options);
    return path;
  }
  static TempDir* dir_;
  static std::string* checkpoint_;
};
TempDir* SafetensorsExport::dir_ = nullptr;
std::string* SafetensorsExport::checkpoint_ = nullptr;

TEST_F(SafetensorsExport, HoldsTheCheckpointsTensorsAndConfig) {
  const std::string path = exported("model.safetensors");
  const Checkpoint ckpt = load_checkpoint(*checkpoint_);
  const util::Safetensors file = util::load_safetensors(path);
  ASSERT_EQ(file.tensors.size(), ckpt.model.size());
  std::map<std::string, torch::Tensor> by_name(file.tensors.begin(), file.tensors.end());
  for (const auto& [name, tensor] : ckpt.model) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name[name].scalar_type(), torch::kFloat) << name;
    EXPECT_TRUE(torch::equal(by_name[name], tensor)) << name;
  }
  EXPECT_EQ(file.metadata.at("config"), ckpt.config_yaml);
  EXPECT_EQ(file.metadata.at("step"), "3");
  EXPECT_EQ(file.metadata.at("weights"), "model");
  EXPECT_EQ(file.metadata.at("dtype"), "float32");
  EXPECT_EQ(file.metadata.at("format"), "pt");

  // load_model takes it where it takes the checkpoint, with the same weights.
  const LoadedModel a = load_model(*checkpoint_);
  const LoadedModel b = load_model(path);
  EXPECT_EQ(b.step, 3);
  EXPECT_EQ(b.weights, "model");
  EXPECT_EQ(config::to_yaml(b.config), config::to_yaml(a.config));
  const auto pa = capture_model(*a.model), pb = capture_model(*b.model);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second));
}

TEST_F(SafetensorsExport, EmaAndBfloat16) {
  ExportOptions ema;
  ema.ema = true;
  const std::string ema_path = exported("ema.safetensors", ema);
  const Checkpoint ckpt = load_checkpoint(*checkpoint_);
  const LoadedModel from_ema = load_model(ema_path);
  EXPECT_EQ(from_ema.weights, "ema");
  std::map<std::string, torch::Tensor> average(ckpt.ema.begin(), ckpt.ema.end());
  for (const auto& [name, tensor] : capture_model(*from_ema.model))
    EXPECT_TRUE(torch::equal(tensor, average.at(name))) << name;

  ExportOptions bf16;
  bf16.dtype = torch::kBFloat16;
  const std::string bf16_path = exported("bf16.safetensors", bf16);
  EXPECT_LT(fs::file_size(bf16_path), fs::file_size(dir_->file("ema.safetensors")));
  const LoadedModel from_bf16 = load_model(bf16_path);
  std::map<std::string, torch::Tensor> weights(ckpt.model.begin(), ckpt.model.end());
  for (const auto& [name, tensor] : capture_model(*from_bf16.model)) {
    EXPECT_EQ(tensor.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(tensor, weights.at(name).to(torch::kBFloat16).to(torch::kFloat)))
        << name;
  }
}

TEST_F(SafetensorsExport, PythonReadsItWithJsonAndNumpyAlone) {
  const Checkpoint ckpt = load_checkpoint(*checkpoint_);
  ExportOptions bf16;
  bf16.dtype = torch::kBFloat16;
  const std::map<std::string, std::string> files = {{"F32", exported("py32.safetensors")},
                                                    {"BF16", exported("py16.safetensors", bf16)}};
  for (const auto& [dtype, path] : files) {
    // What the checkpoint holds, as the file should: names, values (rounded for bf16), config.
    const std::string expected = dir_->file("expected-" + dtype);
    fs::create_directories(expected);
    std::ofstream names(expected + "/names.txt");
    for (const auto& [name, tensor] : ckpt.model) {
      names << name << "\n";
      util::save_npy(expected + "/" + name + ".npy",
                     dtype == "F32" ? tensor : tensor.to(torch::kBFloat16).to(torch::kFloat));
    }
    names.close();
    std::ofstream(expected + "/config.yaml") << ckpt.config_yaml;
    const auto run =
        combiner::testing::run_shell(std::string("/usr/bin/python3 ") + COMBINER_SOURCE_DIR +
                                     "/tests/python/check_safetensors.py " + path + " " + expected);
    EXPECT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(run.output, "ok " + std::to_string(ckpt.model.size()) + " tensors " + dtype + "\n");
  }
}

TEST_F(SafetensorsExport, AnExistingFileIsKeptUnlessForced) {
  const std::string path = dir_->file("taken.safetensors");
  std::ofstream(path) << "previous";
  expect_contains(error_of([&] { export_safetensors(*checkpoint_, path, {}); }),
                  {"--out", path, "exists", "--force"});
  EXPECT_EQ(fs::file_size(path), 8u);
  ExportOptions force;
  force.force = true;
  export_safetensors(*checkpoint_, path, force);
  EXPECT_EQ(load_model(path).step, 3);
}

TEST_F(SafetensorsExport, AFailedExportLeavesThePreviousFileWhole) {
  const std::string path = dir_->file("full-disk.safetensors");
  std::ofstream(path) << "previous";
  ExportOptions force;
  force.force = true;
  const std::string message =
      combiner::testing::message_in_child(combiner::testing::file_size_limit(4096),
                                          [&] { export_safetensors(*checkpoint_, path, force); });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  expect_contains(message, {"cannot write '" + path + "'", "File too large"});
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "previous");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(SafetensorsExport, AFileThatDoesNotFitItsConfigIsRefusedNamingTheTensor) {
  const std::string good = exported("good.safetensors");
  const util::Safetensors file = util::load_safetensors(good);
  // A variant of the good file: tensors edited by `edit`, metadata by `meta`.
  auto variant = [&](const std::string& name,
                     const std::function<void(util::NamedTensorList&)>& edit,
                     const std::function<void(std::map<std::string, std::string>&)>& meta = {}) {
    util::NamedTensorList tensors = file.tensors;
    std::map<std::string, std::string> metadata = file.metadata;
    edit(tensors);
    if (meta) meta(metadata);
    const std::string path = dir_->file(name);
    util::save_safetensors(path, tensors, metadata);
    return path;
  };
  auto find = [](util::NamedTensorList& t, const std::string& name) -> torch::Tensor& {
    for (auto& [n, tensor] : t)
      if (n == name) return tensor;
    throw std::runtime_error("no tensor " + name);
  };
  const std::string missing = variant("missing.safetensors", [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "head.bias"; }),
            t.end());
  });
  expect_contains(
      error_of([&] { load_model(missing); }),
      {missing, "does not match the model of its config", "tensor 'head.bias' is missing"});
  const std::string extra = variant(
      "extra.safetensors", [](auto& t) { t.emplace_back("extra.weight", torch::zeros({2})); });
  expect_contains(error_of([&] { load_model(extra); }),
                  {extra, "tensor 'extra.weight' is not in the model"});
  const std::string half = variant("half.safetensors", [&](auto& t) {
    find(t, "head.weight") = find(t, "head.weight").to(torch::kHalf);
  });
  expect_contains(error_of([&] { load_model(half); }),
                  {half, "tensor 'head.weight' has dtype F16, expected F32 or BF16"});
  const std::string shape = variant("shape.safetensors", [&](auto& t) {
    find(t, "head.weight") = find(t, "head.weight").t().contiguous();
  });
  expect_contains(error_of([&] { load_model(shape); }),
                  {shape,
                   "tensor 'head.weight' has shape [16, 256], the config's model expects "
                   "[256, 16]"});
  const std::string no_config = variant(
      "no-config.safetensors", [](auto&) {}, [](auto& m) { m.erase("config"); });
  expect_contains(error_of([&] { load_model(no_config); }), {no_config, "no \"config\""});

  // A header that does not parse, and data cut short: the reader's own errors, naming the file.
  const std::string broken = dir_->file("broken.safetensors");
  fs::copy_file(good, broken);
  {
    std::fstream f(broken, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('[');
  }
  expect_contains(error_of([&] { load_model(broken); }),
                  {broken, "not a valid safetensors file", "not JSON"});
  const std::string cut = dir_->file("cut.safetensors");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) - 4);
  expect_contains(error_of([&] { load_model(cut); }), {cut, "truncated file"});

  // What the tensors cannot show is compared with the saved config, as for checkpoints; --ema
  // has nothing to choose from.
  expect_contains(error_of([&] { load_model(good, {"model.heads=4"}); }),
                  {good, "model.heads is 2", "4 here"});
  expect_contains(error_of([&] { load_model(good, {}, true); }),
                  {good, "--ema", "combiner-export --ema"});
}

}  // namespace
}  // namespace combiner::train
