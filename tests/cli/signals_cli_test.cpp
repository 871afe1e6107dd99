// combiner-train under signals, through the built binary: SIGTERM finishes the step, writes a
// checkpoint and exits 143; a second signal exits at once; after SIGKILL at arbitrary moments,
// --resume ends with exactly the parameters of a run that was never interrupted (CPU, one
// thread, same seed).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/processes.h"
#include "test_utils.h"
#include "train/checkpoint.h"

namespace combiner {
namespace {

using combiner::testing::ChildProcess;
using combiner::testing::run_binary;
using combiner::testing::TempDir;
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

constexpr int64_t kSteps = 300;

// A run of a few seconds: long enough to be interrupted, with a checkpoint every 20 steps.
std::string config_for(const TempDir& dir, const std::string& run) {
  const std::string path = dir.file(run + ".yaml");
  std::ofstream(path) << "data: {dataset: fashion_mnist, val_size: 8}\n"
                         "model: {layers: 2, width: 32, heads: 2, mlp_ratio: 2, dropout: 0.1,\n"
                         "        attention: {type: combiner-axial-rowmajor}}\n"
                         "train: {steps: "
                      << kSteps
                      << ", batch_size: 4, warmup_steps: 10, threads: 1, final_test: false,\n"
                         "        checkpoint_every: 20, log_every: 1000, out_dir: "
                      << dir.file(run) << "}\n";
  return path;
}

std::string binary(const std::string& name) {
  return std::string(COMBINER_BINARY_DIR) + "/" + name;
}

// Lines in the run's metrics.jsonl: one per finished step.
int64_t steps_logged(const TempDir& dir, const std::string& run) {
  std::ifstream in(dir.file(run + "/metrics.jsonl"));
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);)
    lines += line.find("\"train_bpd\"") != std::string::npos;
  return lines;
}

// Waits until the run has logged more than `steps` steps (or 60 s pass).
void wait_for_steps(const TempDir& dir, const std::string& run, int64_t steps) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (steps_logged(dir, run) <= steps && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class Signals : public ::testing::Test {
 protected:
  // The uninterrupted run that interrupted ones must match.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_binary("combiner-train", "--config " + config_for(*dir_, "straight"));
    ASSERT_EQ(r.status, 0) << r.output;
    straight_ = new Tensors(
        train::load_checkpoint(train::checkpoint_path(dir_->file("straight"), kSteps)).model);
  }
  static void TearDownTestSuite() {
    delete straight_;
    delete dir_;
  }
  static void expect_matches_straight_run(const std::string& checkpoint) {
    const auto model = train::load_checkpoint(checkpoint).model;
    ASSERT_EQ(model.size(), straight_->size());
    for (size_t i = 0; i < model.size(); ++i)
      EXPECT_TRUE(torch::equal(model[i].second, (*straight_)[i].second)) << model[i].first;
  }
  static TempDir* dir_;
  static Tensors* straight_;
};
TempDir* Signals::dir_ = nullptr;
Tensors* Signals::straight_ = nullptr;

TEST_F(Signals, SigtermCheckpointsAndResumeMatchesAStraightRun) {
  TempDir dir;
  const auto config = config_for(dir, "run");
  const std::string log = dir.file("log.txt");
  {
    ChildProcess train({binary("combiner-train"), "--config", config}, {}, log);
    wait_for_steps(dir, "run", 30);
    train.signal(SIGTERM);
    EXPECT_EQ(train.wait_for(60), 128 + SIGTERM) << read_file(log);
  }
  const std::string output = read_file(log);
  const auto at = output.find("stopped by signal 15 after step ");
  ASSERT_NE(at, std::string::npos) << output;
  const int64_t step = std::stoll(output.substr(at + 32));
  EXPECT_GT(step, 30);
  EXPECT_LT(step, kSteps);
  const auto checkpoint = train::checkpoint_path(dir.file("run"), step);
  EXPECT_NE(output.find("checkpoint: " + checkpoint), std::string::npos) << output;
  EXPECT_EQ(train::load_checkpoint(checkpoint).step, step);

  const auto resumed = run_binary("combiner-train", "--config " + config + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  expect_matches_straight_run(train::checkpoint_path(dir.file("run"), kSteps));
}

TEST_F(Signals, ASecondSignalExitsAtOnce) {
  TempDir dir;
  // Steps of about a second, so that the second signal lands inside the step the first one
  // lets finish. (Two signals of one kind sent at once can merge into one: wait for the first.)
  const std::string config = dir.file("slow.yaml");
  std::ofstream(config) << "data: {dataset: fashion_mnist, val_size: 8}\n"
                           "model: {layers: 4, width: 128, heads: 4, attention: {type: full}}\n"
                           "train: {steps: 100, batch_size: 32, threads: 1, final_test: false,\n"
                           "        out_dir: "
                        << dir.file("run") << "}\n";
  const std::string log = dir.file("log.txt");
  ChildProcess train({binary("combiner-train"), "--config", config}, {}, log);
  wait_for_steps(dir, "run", 0);
  train.signal(SIGINT);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read_file(log).find("stop requested") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  train.signal(SIGTERM);
  EXPECT_EQ(train.wait_for(60), 128 + SIGTERM);
  const std::string output = read_file(log);
  EXPECT_NE(output.find("second signal: exiting without a checkpoint"), std::string::npos)
      << output;
  EXPECT_EQ(output.find("stopped by signal"), std::string::npos) << output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/checkpoints")) &&
               !std::filesystem::is_empty(dir.file("run/checkpoints")));
}

TEST_F(Signals, KillNineTwiceThenResumeMatchesAStraightRun) {
  TempDir dir;
  const auto config = config_for(dir, "run");
  // Killed twice, at step counts that fall between checkpoints and (likely) inside one.
  for (const int64_t after : {45, 140}) {
    std::vector<std::string> argv = {binary("combiner-train"), "--config", config};
    if (after != 45) argv.push_back("--resume");
    ChildProcess train(argv, {}, dir.file("log.txt"));
    wait_for_steps(dir, "run", after);
    train.signal(SIGKILL);
    EXPECT_EQ(train.wait_for(60), -1);  // killed, not exited
  }
  const auto resumed = run_binary("combiner-train", "--config " + config + " --resume");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  expect_matches_straight_run(train::checkpoint_path(dir.file("run"), kSteps));
}

}  // namespace
}  // namespace combiner
