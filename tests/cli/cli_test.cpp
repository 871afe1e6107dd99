// End to end through the built binaries: train a tiny model, evaluate it, sample from it, and
// check that bad input gives one clear error line and a non-zero exit.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/run_binary.h"
#include "cli/tiny_config.h"
#include "event_reader.h"
#include "test_utils.h"
#include "util/npy.h"

namespace combiner {
namespace {

using combiner::testing::TempDir;
using combiner::testing::tiny_config;

using Result = combiner::testing::BinaryRun;
using combiner::testing::run_binary;

class Cli : public ::testing::Test {
 protected:
  // One trained tiny model shared by the tests of this suite.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_binary("combiner-train", "--config " + tiny_config(*dir_));
    ASSERT_EQ(r.status, 0) << r.output;
    checkpoint_ = r.last_line().substr(std::string("checkpoint: ").size());
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
  static std::string checkpoint_;
};
TempDir* Cli::dir_ = nullptr;
std::string Cli::checkpoint_;

TEST_F(Cli, TrainWritesCheckpointMetricsAndConfig) {
  EXPECT_TRUE(std::filesystem::exists(checkpoint_)) << checkpoint_;
  EXPECT_TRUE(std::filesystem::exists(dir_->file("run/metrics.jsonl")));
  EXPECT_TRUE(std::filesystem::exists(dir_->file("run/config.yaml")));
  std::ifstream metrics(dir_->file("run/metrics.jsonl"));
  std::string line;
  int lines = 0;
  while (std::getline(metrics, line)) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_NE(line.find("\"train_bpd\""), std::string::npos);
    ++lines;
  }
  EXPECT_EQ(lines, 3);
}

TEST_F(Cli, TrainPrintsTestBitsPerDimWhenAsked) {
  TempDir dir;
  auto r = run_binary(
      "combiner-train",
      "--config " + tiny_config(dir) + " --set train.steps=1 --set train.final_test=true");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto at = r.output.find("\ntest_bpd: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.last_line().rfind("checkpoint: ", 0), 0u) << r.output;
  // TensorBoard has it too, at the last step.
  const auto files = combiner::testing::decode_event_files(
      combiner::testing::event_files(dir.file("run/tb")), dir.path());
  ASSERT_EQ(files.size(), 1u);
  const auto test = files[0].of("test/bpd");
  ASSERT_EQ(test.size(), 1u);
  EXPECT_EQ(test[0].step, 1);
  EXPECT_NEAR(test[0].value(), std::stod(r.output.substr(at + 11)), 5e-5);
}

TEST_F(Cli, EvalPrintsBitsPerDimAndDumps) {
  const auto bits = dir_->file("bits.npy");
  const auto heatmap = dir_->file("heat.png");
  auto r = run_binary(
      "combiner-eval",
      "--checkpoint " + checkpoint_ + " --split val --dump-bits " + bits + " --heatmap " + heatmap);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto line = r.last_line();
  ASSERT_EQ(line.rfind("val_bpd: ", 0), 0u) << line;
  const double bpd = std::stod(line.substr(9));
  EXPECT_GT(bpd, 0.0);
  EXPECT_LT(bpd, 9.0);
  EXPECT_EQ(line.size() - line.find('.') - 1, 4u) << "four decimals: " << line;
  auto dumped = util::load_npy(bits);
  EXPECT_EQ(dumped.sizes(), (std::vector<int64_t>{6, 784}));
  EXPECT_NEAR(dumped.to(torch::kDouble).mean().item<double>(), bpd, 1e-4);
  EXPECT_TRUE(std::filesystem::exists(heatmap));
}

TEST_F(Cli, SampleWritesGridAndArray) {
  const auto png = dir_->file("grid.png");
  const auto npy = dir_->file("samples.npy");
  auto r = run_binary(
      "combiner-sample",
      "--checkpoint " + checkpoint_ + " --num 2 --temperature 0 --out " + png + " --npy " + npy);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(png));
  auto samples = util::load_npy(npy);
  EXPECT_EQ(samples.sizes(), (std::vector<int64_t>{2, 28, 28, 1}));
  EXPECT_EQ(samples.scalar_type(), torch::kUInt8);
}

TEST_F(Cli, CachedAndUncachedSamplingAgree) {
  std::vector<torch::Tensor> drawn;
  for (const std::string flag : {"", " --no-cache", " --decoder static"}) {
    const auto npy = dir_->file("draw" + std::to_string(drawn.size()) + ".npy");
    auto r = run_binary("combiner-sample",
                        "--checkpoint " + checkpoint_ + " --num 2 --seed 3 --out " +
                            dir_->file("g.png") + " --npy " + npy + flag);
    ASSERT_EQ(r.status, 0) << r.output;
    const std::string path = flag.empty()            ? "(cached, dynamic"
                             : flag == " --no-cache" ? "(uncached"
                                                     : "(cached, static";
    EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("images/s"), std::string::npos) << r.output;
    // The progress line, here once at the end (not a terminal, and under the 5 s between lines).
    EXPECT_NE(r.output.find("sample (2 images, 2 at a time): 784/784 steps | "), std::string::npos)
        << r.output;
    drawn.push_back(util::load_npy(npy));
  }
  EXPECT_TRUE(torch::equal(drawn[0], drawn[1]));
  EXPECT_TRUE(torch::equal(drawn[0], drawn[2]));
}

// bfloat16 caches: the static decoder under auto, named in the summary line; refused in one
// line by the dynamic decoder, and an unknown dtype named, with no grid written.
TEST_F(Cli, SamplingWithBFloat16Caches) {
  const auto png = dir_->file("bf16.png");
  auto r = run_binary(
      "combiner-sample",
      "--checkpoint " + checkpoint_ + " --num 2 --seed 3 --cache-dtype bfloat16" + " --out " + png);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("(cached, static, bfloat16 caches, "), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(png));
  const auto never = dir_->file("never.png");
  for (const std::string& flags : {std::string("--cache-dtype float16"),
                                   std::string("--cache-dtype bfloat16 --decoder dynamic")}) {
    r = run_binary("combiner-sample",
                   "--checkpoint " + checkpoint_ + " --num 1 " + flags + " --out " + never);
    EXPECT_NE(r.status, 0) << flags;
    const std::string why = flags == "--cache-dtype float16"
                                ? "--cache-dtype: expected float32 or bfloat16, got 'float16'"
                                : "--cache-dtype bfloat16 is the static decoder's";
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(never)) << flags;
  }
}

TEST_F(Cli, SamplingRefusesAnUnknownDecoder) {
  const auto png = dir_->file("never.png");
  auto r = run_binary("combiner-sample",
                      "--checkpoint " + checkpoint_ + " --num 1 --decoder graph --out " + png);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--decoder: expected auto, dynamic or static, got 'graph'"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(png));
}

TEST_F(Cli, EmaWeightsAreSavedAndUsedWhenAsked) {
  TempDir dir;
  auto r =
      run_binary("combiner-train", "--config " + tiny_config(dir) + " --set train.ema_decay=0.9");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto checkpoint = r.last_line().substr(std::string("checkpoint: ").size());
  auto eval = run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split val --ema");
  ASSERT_EQ(eval.status, 0) << eval.output;
  EXPECT_NE(eval.output.find("ema weights"), std::string::npos) << eval.output;
  EXPECT_NE(eval.output.find("eval val: "), std::string::npos) << eval.output;
  EXPECT_NE(eval.output.find(" images | "), std::string::npos) << eval.output;
  EXPECT_NE(eval.output.find(" | done in "), std::string::npos) << eval.output;
  auto raw = run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split val");
  ASSERT_EQ(raw.status, 0) << raw.output;
  EXPECT_NE(raw.output.find("model weights"), std::string::npos) << raw.output;
  EXPECT_NE(raw.last_line(), eval.last_line());  // three updates moved the raw weights away
  auto sample =
      run_binary("combiner-sample",
                 "--checkpoint " + checkpoint + " --ema --num 1 --out " + dir.file("ema.png"));
  ASSERT_EQ(sample.status, 0) << sample.output;
}

TEST_F(Cli, BadArgumentsGiveOneLineErrors) {
  struct Case {
    std::string binary, args, expected;
  };
  const std::vector<Case> cases = {
      {"combiner-sample", "--checkpoint " + checkpoint_ + " --num 0", "--num must be > 0"},
      {"combiner-sample", "--checkpoint " + checkpoint_ + " --temperature -1", "--temperature"},
      {"combiner-sample", "--checkpoint /nonexistent/x.ckpt", "/nonexistent/x.ckpt"},
      {"combiner-sample", "--num 2", "--checkpoint"},
      {"combiner-sample", "--checkpoint " + checkpoint_ + " --batch -1", "--batch"},
      {"combiner-sample", "--checkpoint " + checkpoint_ + " --ema", "no EMA weights"},
      {"combiner-sample", "--config /nonexistent.yaml", "/nonexistent.yaml"},
      {"combiner-eval", "--checkpoint " + checkpoint_ + " --ema", "no EMA weights"},
      {"combiner-eval", "--checkpoint /nonexistent/x.ckpt", "/nonexistent/x.ckpt"},
      // Same tensors, other attention: refused by the config keys the checkpoint holds.
      {"combiner-eval",
       "--checkpoint " + checkpoint_ + " --set model.attention.type=axial",
       "model.attention.type is 'combiner-axial-rowmajor' in the checkpoint, 'axial' here"},
      {"combiner-sample",
       "--checkpoint " + checkpoint_ + " --set model.heads=4",
       "model.heads is 2 in the checkpoint, 4 here"},
      {"combiner-eval",
       "--checkpoint " + checkpoint_ + " --set data.dir=/nonexistent",
       "/nonexistent"},
      {"combiner-train", "--config /nonexistent.yaml", "/nonexistent.yaml"},
      {"combiner-train", "--config " + tiny_config(*dir_) + " --set train.lrr=1", "train.lrr"},
      {"combiner-train",
       "--config " + tiny_config(*dir_) + " --set model.attention.type=nope",
       "model.attention.type"},
      {"combiner-train", "--config " + tiny_config(*dir_), "--resume"},  // run folder is taken
  };
  for (const auto& c : cases) {
    auto r = run_binary(c.binary, c.args);
    EXPECT_EQ(r.status, 1) << c.binary << " " << c.args << "\n" << r.output;
    EXPECT_NE(r.last_line().find(c.expected), std::string::npos) << r.output;
    EXPECT_NE(r.last_line().find(": error: "), std::string::npos) << r.output;
  }
  // The refused runs overwrote nothing.
  EXPECT_TRUE(std::filesystem::exists(checkpoint_));
}

}  // namespace
}  // namespace combiner
