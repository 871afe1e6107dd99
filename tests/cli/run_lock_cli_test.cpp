// Two trainers on one run folder, through the built binaries: while one is in the middle of its
// run, a second, fresh or resuming, is refused with one line naming the folder and the holder's
// pid and writes nothing; eval, sample and export read the folder meanwhile; after kill -9 of
// the holder the folder resumes at once. In a two-process run, rank 0 alone takes the lock.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/processes.h"
#include "cli/tiny_config.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/run_lock.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;
using combiner::testing::ChildProcess;
using combiner::testing::read_text;
using combiner::testing::run_binary;
using combiner::testing::run_shell;
using combiner::testing::TempDir;
using combiner::testing::tiny_config;

// The step numbers of metrics.jsonl's training lines, in file order.
std::vector<int64_t> logged_steps(const std::string& run) {
  std::vector<int64_t> steps;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (line.find("\"train_bpd\"") != std::string::npos)
      steps.push_back(std::stoll(line.substr(line.find("\"step\": ") + 8)));
  return steps;
}

// Waits (60 s at most) until `done` holds.
void wait_until(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

TEST(RunLockCli, OneTrainerPerFolderReadersMeanwhileAndKillNineLeavesItResumable) {
  TempDir dir;
  const std::string config = tiny_config(dir), run = dir.file("run");
  const auto first = run_binary("combiner-train", "--config " + config);
  ASSERT_EQ(first.status, 0) << first.output;
  const std::string checkpoint = train::checkpoint_path(run, 3);

  // The holder: the run resumed for far more steps than the test lets it take.
  const std::string train = std::string(COMBINER_BINARY_DIR) + "/combiner-train";
  ChildProcess holder({train, "--config", config, "--resume", "--set", "train.steps=1000000"},
                      {},
                      dir.file("holder.log"));
  const std::string holder_pid = "pid " + std::to_string(holder.pid()) + " on host ";
  wait_until([&] { return logged_steps(run).size() >= 5; });
  ASSERT_NE(read_text(run + "/train.lock").find(holder_pid), std::string::npos)
      << read_text(dir.file("holder.log"));
  // Paused mid-run, it keeps its lock (and leaves the cores to the processes below).
  holder.signal(SIGSTOP);

  const std::string refusal =
      "train.out_dir: " + run + " is in use by another combiner-train (" + holder_pid;
  for (const std::string extra : {"", " --resume"}) {
    const auto second = run_binary("combiner-train", "--config " + config + extra);
    EXPECT_EQ(second.status, 1) << second.output;
    EXPECT_NE(second.last_line().find(refusal), std::string::npos) << second.output;
  }
  // Readers take no lock.
  const auto eval = run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split val");
  EXPECT_EQ(eval.status, 0) << eval.output;
  const auto sample = run_binary(
      "combiner-sample", "--checkpoint " + checkpoint + " --num 1 --out " + dir.file("s.png"));
  EXPECT_EQ(sample.status, 0) << sample.output;
  const auto exported = run_binary(
      "combiner-export", "--checkpoint " + checkpoint + " --out " + dir.file("m.safetensors"));
  EXPECT_EQ(exported.status, 0) << exported.output;
  EXPECT_TRUE(holder.running());

  // The folder holds one run: the first three steps, then the holder's, each once and in order;
  // the holder's config; two event files (the first invocation's and the holder's).
  const auto steps = logged_steps(run);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], int64_t(i) + 1);
  EXPECT_NE(read_text(run + "/config.yaml").find("steps: 1000000"), std::string::npos);
  int64_t event_files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(run + "/tb"))
    event_files += entry.path().filename().string().rfind("events.out.tfevents", 0) == 0;
  EXPECT_EQ(event_files, 2);
  EXPECT_EQ(train::list_checkpoints(run), std::vector<std::string>{checkpoint});

  holder.signal(SIGKILL);  // stopped or not
  EXPECT_EQ(holder.wait_for(60), -1);
  const auto resumed =
      run_binary("combiner-train", "--config " + config + " --resume --set train.steps=4");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from " + checkpoint + " at step 3"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.last_line(), "checkpoint: " + train::checkpoint_path(run, 4));
}

TEST(RunLockCli, RankZeroOfATwoProcessRunTakesTheLock) {
  TempDir dir;
  const std::string config = tiny_config(dir), run = dir.file("run");
  fs::create_directories(run);
  const train::RunFolderLock held(run);
  const std::string launch = std::string(COMBINER_SOURCE_DIR) + "/scripts/launch.sh";
  const auto r =
      run_shell(launch + " -n 2 -- " + COMBINER_BINARY_DIR + "/combiner-train --config " + config);
  EXPECT_NE(r.status, 0) << r.output;
  const std::string refusal =
      "is in use by another combiner-train (pid " + std::to_string(getpid()) + " on host ";
  const auto at = r.output.find(refusal);
  EXPECT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(refusal, at + 1), std::string::npos) << "rank 1 takes no lock:\n"
                                                               << r.output;
  EXPECT_FALSE(fs::exists(run + "/config.yaml"));
}

}  // namespace
}  // namespace combiner
