// combiner-export end to end, and what the binaries write to TensorBoard: the exported file
// evaluates to the checkpoint's bits/dim to the last digit and samples the same images, output
// files are kept unless --force, bad files give one line naming the file and the tensor, and
// combiner-eval --heatmap adds the heatmap to a folder of its own in the run's TensorBoard folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_binary.h"
#include "cli/tiny_config.h"
#include "event_reader.h"
#include "test_utils.h"
#include "util/npy.h"
#include "util/safetensors.h"

namespace combiner {
namespace {

using combiner::testing::decode_event_files;
using combiner::testing::event_files;
using combiner::testing::run_binary;
using combiner::testing::TempDir;
using combiner::testing::tiny_config;

namespace fs = std::filesystem;

class Export : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const std::string config = tiny_config(*dir_);
    auto r = run_binary("combiner-train", "--config " + config);
    ASSERT_EQ(r.status, 0) << r.output;
    checkpoint_ = r.last_line().substr(std::string("checkpoint: ").size());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string export_to(const std::string& name, const std::string& flags = "") {
    const std::string out = dir_->file(name);
    auto r = run_binary("combiner-export", "--checkpoint " + checkpoint_ + " --out " + out + flags);
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.last_line(), "safetensors: " + out) << r.output;
    return out;
  }
  static TempDir* dir_;
  static std::string checkpoint_;
};
TempDir* Export::dir_ = nullptr;
std::string Export::checkpoint_;

TEST_F(Export, EvalOfTheExportGivesTheCheckpointsBitsPerDim) {
  const std::string fp32 = export_to("model.safetensors");
  const std::string bf16 = export_to("model-bf16.safetensors", " --dtype bfloat16");
  auto from_checkpoint =
      run_binary("combiner-eval", "--checkpoint " + checkpoint_ + " --split val");
  auto from_export = run_binary("combiner-eval", "--checkpoint " + fp32 + " --split val");
  ASSERT_EQ(from_checkpoint.status, 0) << from_checkpoint.output;
  ASSERT_EQ(from_export.status, 0) << from_export.output;
  ASSERT_EQ(from_checkpoint.last_line().rfind("val_bpd: ", 0), 0u) << from_checkpoint.output;
  EXPECT_EQ(from_export.last_line(), from_checkpoint.last_line());
  EXPECT_NE(from_export.output.find("step 3 model weights"), std::string::npos)
      << from_export.output;
  // bf16 weights: a number close to it (the model is tiny; rounding moves it little).
  auto from_bf16 = run_binary("combiner-eval", "--checkpoint " + bf16 + " --split val");
  ASSERT_EQ(from_bf16.status, 0) << from_bf16.output;
  EXPECT_NEAR(std::stod(from_bf16.last_line().substr(9)),
              std::stod(from_checkpoint.last_line().substr(9)),
              0.05);
  EXPECT_LT(fs::file_size(bf16), fs::file_size(fp32));
}

TEST_F(Export, SamplingTheExportDrawsTheCheckpointsImages) {
  const std::string fp32 = export_to("sample.safetensors");
  std::vector<torch::Tensor> drawn;
  for (const auto& source : {checkpoint_, fp32}) {
    const std::string npy = dir_->file("draw" + std::to_string(drawn.size()) + ".npy");
    auto r = run_binary("combiner-sample",
                        "--checkpoint " + source + " --num 2 --seed 3 --threads 1 --out " +
                            dir_->file("g.png") + " --npy " + npy);
    ASSERT_EQ(r.status, 0) << r.output;
    drawn.push_back(util::load_npy(npy));
  }
  EXPECT_TRUE(torch::equal(drawn[0], drawn[1]));
}

TEST_F(Export, AnExistingOutputIsReplacedOnlyWithForce) {
  const std::string out = dir_->file("taken.safetensors");
  std::ofstream(out) << "previous";
  auto refused = run_binary("combiner-export", "--checkpoint " + checkpoint_ + " --out " + out);
  EXPECT_EQ(refused.status, 1);
  EXPECT_EQ(refused.output,
            "combiner-export: error: --out: '" + out + "' exists; pass --force to replace it\n");
  EXPECT_EQ(fs::file_size(out), 8u);
  auto forced =
      run_binary("combiner-export", "--checkpoint " + checkpoint_ + " --out " + out + " --force");
  EXPECT_EQ(forced.status, 0) << forced.output;
  EXPECT_EQ(util::load_safetensors(out).metadata.at("step"), "3");
}

TEST_F(Export, BadFilesGiveOneLineErrorsNamingTheFileAndTensor) {
  const std::string good = export_to("good.safetensors");
  auto file = util::load_safetensors(good);
  const std::string dropped = file.tensors.back().first;
  file.tensors.pop_back();
  const std::string short_one = dir_->file("short.safetensors");
  util::save_safetensors(short_one, file.tensors, file.metadata);
  const std::string cut = dir_->file("cut.safetensors");
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) - 100);
  struct Case {
    std::string binary, args, expected;
  };
  const std::vector<Case> cases = {
      {"combiner-eval",
       "--checkpoint " + short_one,
       short_one + ": does not match the model of its config: tensor '" + dropped + "' is missing"},
      {"combiner-sample",
       "--checkpoint " + cut + " --num 1",
       cut + ": not a valid safetensors file: tensor '"},
      {"combiner-eval", "--checkpoint " + good + " --ema", "one set of weights"},
      {"combiner-export",
       "--checkpoint /nonexistent/x.ckpt --out " + dir_->file("x.safetensors"),
       "/nonexistent/x.ckpt"},
      {"combiner-export",
       "--checkpoint " + checkpoint_ + " --out /nonexistent/z.safetensors",
       "/nonexistent/z.safetensors"},
  };
  for (const auto& c : cases) {
    auto r = run_binary(c.binary, c.args);
    EXPECT_EQ(r.status, 1) << c.binary << " " << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    EXPECT_EQ(r.output.rfind(c.binary + ": error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_->file("x.safetensors")));
  auto dtype = run_binary(
      "combiner-export",
      "--checkpoint " + checkpoint_ + " --out " + dir_->file("y.safetensors") + " --dtype float16");
  EXPECT_NE(dtype.status, 0);
  EXPECT_NE(dtype.output.find("--dtype"), std::string::npos) << dtype.output;
  EXPECT_FALSE(fs::exists(dir_->file("y.safetensors")));
}

TEST_F(Export, EvalHeatmapGoesToTheRunsTensorBoardInAFolderOfItsOwn) {
  const std::string tb = dir_->file("run/tb");
  ASSERT_EQ(event_files(tb).size(), 1u);  // training's
  auto r = run_binary(
      "combiner-eval",
      "--checkpoint " + checkpoint_ + " --split val --heatmap " + dir_->file("heat.png"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(event_files(tb).size(), 1u);  // training's run gets no point of the evaluation
  const std::string own = tb + "/eval-step-00000003-val";
  const auto files = event_files(own);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(r.output.find("heatmap and bits/dim also in " + files[0]), std::string::npos)
      << r.output;
  const auto decoded = decode_event_files(files, dir_->path());
  const auto& f = decoded[0];
  ASSERT_EQ(f.events.size(), 4u);  // version, restart (a second evaluation replaces), image, scalar
  EXPECT_EQ(f.events[0].kind, "version");
  EXPECT_EQ(f.events[1].kind, "start");
  EXPECT_EQ(f.events[1].step, 3);
  const auto heatmap = f.of("eval/val_bits_heatmap");
  ASSERT_EQ(heatmap.size(), 1u);
  EXPECT_EQ(heatmap[0].step, 3);
  EXPECT_EQ(heatmap[0].rest, "224 224 3 224 224");  // 28 x 28 subpixels, 8 pixels each, RGB
  const auto bpd = f.of("eval/val_bpd");
  ASSERT_EQ(bpd.size(), 1u);
  EXPECT_NEAR(bpd[0].value(), std::stod(r.last_line().substr(9)), 5e-5);

  // An exported file has no run folder: --tensorboard names one.
  const std::string other = dir_->file("elsewhere");
  auto st = run_binary("combiner-eval",
                       "--checkpoint " + export_to("heat.safetensors") + " --split val --heatmap " +
                           dir_->file("heat2.png") + " --tensorboard " + other);
  ASSERT_EQ(st.status, 0) << st.output;
  EXPECT_TRUE(event_files(other).empty());
  const auto elsewhere =
      decode_event_files(event_files(other + "/eval-step-00000003-val"), dir_->path());
  ASSERT_EQ(elsewhere.size(), 1u);
  EXPECT_EQ(elsewhere[0].of("eval/val_bits_heatmap").size(), 1u);
  EXPECT_EQ(event_files(own).size(), 1u);
}

}  // namespace
}  // namespace combiner
