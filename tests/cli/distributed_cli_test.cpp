// Data-parallel runs end to end: two processes on loopback (scripts/launch.sh, Gloo) reach the
// parameters of one process with the same global batch, evaluate every image once, resume
// across process counts, stop when a rank dies or hangs, and refuse a bad environment.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/processes.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "util/npy.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;
using combiner::testing::BinaryRun;
using combiner::testing::ChildProcess;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

const std::string kTrain = std::string(COMBINER_BINARY_DIR) + "/combiner-train";
const std::string kEval = std::string(COMBINER_BINARY_DIR) + "/combiner-eval";
const std::string kLaunch = std::string(COMBINER_SOURCE_DIR) + "/scripts/launch.sh";

// Global batch 4 in 2 micro-batches: 2 images per micro-batch in one process, 1 in each of two.
std::string write_distributed_config(const TempDir& dir) {
  const std::string path = dir.file("tiny.yaml");
  std::ofstream(path) << "data: {dataset: fashion_mnist, val_size: 7}\n"
                         "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2, dropout: 0.0,\n"
                         "        attention: {type: combiner-axial-rowmajor}}\n"
                         "train: {steps: 3, batch_size: 4, grad_accum: 2, warmup_steps: 1,\n"
                         "        threads: 1, final_test: false, checkpoint_every: 2,\n"
                         "        keep_checkpoints: 5, eval_every: 3, eval_batch_size: 2,\n"
                         "        log_every: 1}\n";
  return path;
}

BinaryRun train(const std::string& config,
                const std::string& out_dir,
                const std::string& extra,
                int processes) {
  const std::string args = " --config " + config + " --set train.out_dir=" + out_dir + " " + extra;
  if (processes == 1) return run_shell(kTrain + args);
  return run_shell(kLaunch + " -n " + std::to_string(processes) + " -- " + kTrain + args);
}

std::string line_with(const std::string& output, const std::string& part) {
  const auto at = output.find(part);
  if (at == std::string::npos) return "";
  const auto begin = output.rfind('\n', at);
  const auto end = output.find('\n', at);
  return output.substr(begin == std::string::npos ? 0 : begin + 1,
                       end == std::string::npos ? std::string::npos : end - begin - 1);
}

double value_after(const std::string& output, const std::string& key) {
  const auto line = line_with(output, key);
  return line.empty() ? -1.0 : std::stod(line.substr(line.find(key) + key.size()));
}

// Parameters equal up to float round-off: the ranks sum their gradients in another order.
void expect_same_parameters(const std::string& a_path, const std::string& b_path) {
  const auto a = train::load_checkpoint(a_path), b = train::load_checkpoint(b_path);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.samples_seen, b.samples_seen);
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i) {
    EXPECT_EQ(a.model[i].first, b.model[i].first);
    const double diff = (a.model[i].second - b.model[i].second).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << a.model[i].first << " differs between " << a_path << " and " << b_path;
  }
}

std::string ckpt(const std::string& out_dir, int64_t step) {
  return train::checkpoint_path(out_dir, step);
}

class DistributedCli : public ::testing::Test {
 protected:
  // The same 3-step run in one process and in two, shared by the tests of this suite.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    config_ = write_distributed_config(*dir_);
    one_ = train(config_, dir_->file("one"), "", 1);
    two_ = train(config_, dir_->file("two"), "", 2);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
  static std::string config_;
  static BinaryRun one_, two_;
};
TempDir* DistributedCli::dir_ = nullptr;
std::string DistributedCli::config_;
BinaryRun DistributedCli::one_, DistributedCli::two_;

TEST_F(DistributedCli, TwoProcessesReachTheParametersOfOne) {
  ASSERT_EQ(one_.status, 0) << one_.output;
  ASSERT_EQ(two_.status, 0) << two_.output;
  EXPECT_NE(two_.output.find("data parallel: 2 processes over gloo"), std::string::npos)
      << two_.output;
  EXPECT_EQ(two_.output.find("[rank 1]"), std::string::npos) << "rank 1 logs only errors";
  EXPECT_EQ(two_.last_line(), "checkpoint: " + ckpt(dir_->file("two"), 3)) << two_.output;
  expect_same_parameters(ckpt(dir_->file("one"), 2), ckpt(dir_->file("two"), 2));
  expect_same_parameters(ckpt(dir_->file("one"), 3), ckpt(dir_->file("two"), 3));
  // The logged training loss is the global batch's, as in one process.
  for (const std::string step : {"step      1/3", "step      3/3"}) {
    const double a = value_after(line_with(one_.output, step), "train bpd ");
    const double b = value_after(line_with(two_.output, step), "train bpd ");
    EXPECT_GT(a, 0.0) << one_.output;
    EXPECT_NEAR(a, b, 1e-4) << step;
  }
}

TEST_F(DistributedCli, ValidationCountsEveryImageOnce) {
  ASSERT_EQ(two_.status, 0) << two_.output;
  // 7 validation images in shards of 3 and 4: the sum over the ranks is the split.
  EXPECT_NE(two_.output.find("val bpd"), std::string::npos) << two_.output;
  EXPECT_NE(two_.output.find("(7 images)"), std::string::npos) << two_.output;
  EXPECT_NEAR(value_after(one_.output, "val bpd "), value_after(two_.output, "val bpd "), 1e-4);
}

TEST_F(DistributedCli, RankZeroAloneWritesTheRunFolder) {
  ASSERT_EQ(two_.status, 0) << two_.output;
  std::ifstream metrics(dir_->file("two/metrics.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  EXPECT_EQ(lines, 4);  // 3 steps + 1 validation, written once
  EXPECT_EQ(train::list_checkpoints(dir_->file("two")).size(), 2u);
}

TEST_F(DistributedCli, TwoProcessEvalEqualsOneProcess) {
  const auto checkpoint = ckpt(dir_->file("one"), 3);
  const std::string args =
      " --checkpoint " + checkpoint + " --split val --batch-size 2 --dump-bits ";
  const auto one = run_shell(kEval + args + dir_->file("bits1.npy"));
  const auto two = run_shell(kLaunch + " -n 2 -- " + kEval + args + dir_->file("bits2.npy"));
  ASSERT_EQ(one.status, 0) << one.output;
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_NE(two.output.find("7 images of fashion_mnist/val"), std::string::npos) << two.output;
  ASSERT_EQ(two.last_line().rfind("val_bpd: ", 0), 0u) << two.output;
  EXPECT_NEAR(value_after(one.output, "val_bpd: "), value_after(two.output, "val_bpd: "), 1e-4);
  const auto bits1 = util::load_npy(dir_->file("bits1.npy"));
  const auto bits2 = util::load_npy(dir_->file("bits2.npy"));
  EXPECT_EQ(bits2.sizes(), (std::vector<int64_t>{7, 784}));
  EXPECT_TRUE(torch::allclose(bits1, bits2, 1e-4, 1e-5));
}

// A copy of a finished run without its last checkpoint, as if it stopped after step 2.
std::string interrupted_copy(const std::string& run, const std::string& copy) {
  fs::copy(run, copy, fs::copy_options::recursive);
  fs::remove(ckpt(copy, 3));
  return copy;
}

TEST_F(DistributedCli, ResumeTwoProcessCheckpointInOneProcess) {
  ASSERT_EQ(two_.status, 0) << two_.output;
  const auto run = interrupted_copy(dir_->file("two"), dir_->file("two-then-one"));
  const auto r = train(config_, run, "--resume", 1);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + ckpt(run, 2)), std::string::npos) << r.output;
  expect_same_parameters(ckpt(dir_->file("one"), 3), ckpt(run, 3));
}

TEST_F(DistributedCli, ResumeOneProcessCheckpointInTwoProcesses) {
  ASSERT_EQ(one_.status, 0) << one_.output;
  const auto run = interrupted_copy(dir_->file("one"), dir_->file("one-then-two"));
  const auto r = train(config_, run, "--resume", 2);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_same_parameters(ckpt(dir_->file("one"), 3), ckpt(run, 3));
}

// Two ranks started by hand; once both train, `stop` is applied to rank 1. Rank 0 must exit
// with one error line within the 2 s train.dist_timeout_s (plus start-up slack).
std::string rank_zero_error_after(const TempDir& dir, int stop_signal) {
  const std::string port = std::to_string(combiner::testing::free_port());
  const std::string config = write_distributed_config(dir);
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (const std::string rank : {"0", "1"})
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{kTrain,
                                 "--config",
                                 config,
                                 "--set",
                                 "train.out_dir=" + dir.file("run"),
                                 "--set",
                                 "train.steps=100000",
                                 "--set",
                                 "train.checkpoint_every=0",
                                 "--set",
                                 "train.eval_every=0",
                                 "--set",
                                 "train.dist_timeout_s=2"},
        std::vector<std::pair<std::string, std::string>>{{"RANK", rank},
                                                         {"WORLD_SIZE", "2"},
                                                         {"MASTER_ADDR", "127.0.0.1"},
                                                         {"MASTER_PORT", port}},
        dir.file("rank" + rank + ".log")));
  // Training has started once rank 0 has logged a few steps.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int lines = 0; lines < 5 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream metrics(dir.file("run/metrics.jsonl"));
    lines = 0;
    for (std::string line; std::getline(metrics, line);) ++lines;
  }
  ranks[1]->signal(stop_signal);
  const auto status = ranks[0]->wait_for(15);
  EXPECT_EQ(status, std::optional<int>(1)) << "rank 0 did not stop with an error";
  std::ifstream log(dir.file("rank0.log"));
  std::string line, last;
  while (std::getline(log, line)) last = line;
  return last;
}

TEST(DistributedFailure, ADeadRankStopsTheOthers) {
  TempDir dir;
  const auto error = rank_zero_error_after(dir, SIGKILL);
  EXPECT_EQ(error.rfind("combiner-train: error: rank 0 of 2: ", 0), 0u) << error;
  EXPECT_NE(error.find("failed: another rank exited or did not answer"), std::string::npos)
      << error;
}

TEST(DistributedFailure, AHungRankTimesOut) {
  TempDir dir;
  const auto start = std::chrono::steady_clock::now();
  const auto error = rank_zero_error_after(dir, SIGSTOP);  // alive but silent
  EXPECT_EQ(error.rfind("combiner-train: error: rank 0 of 2: ", 0), 0u) << error;
  EXPECT_NE(error.find("train.dist_timeout_s = 2 s"), std::string::npos) << error;
  EXPECT_NE(error.find("Timed out"), std::string::npos) << error;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(DistributedFailure, LaunchStopsTheRestWhenOneRankFails) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = run_shell(kLaunch +
                           " -n 3 -- sh -c 'if [ \"$RANK\" = 1 ]; then echo bad >&2; exit 3; fi; "
                           "exec sleep 30'");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_NE(r.output.find("[rank 1] bad"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("launch.sh: rank 1 exited with status 3"), std::string::npos) << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(DistributedFailure, BadEnvironmentGivesOneLineErrors) {
  TempDir dir;
  const auto config = write_distributed_config(dir);
  const std::string args = " --config " + config + " --set train.out_dir=" + dir.file("run");
  struct Case {
    std::string command, expected;
  };
  const std::vector<Case> cases = {
      {"env RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 " + kTrain + args,
       "combiner-train: error: environment: RANK=5 is outside [0, WORLD_SIZE=2)"},
      {"env RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 " + kTrain + args,
       "combiner-train: error: environment: WORLD_SIZE > 1 needs MASTER_ADDR"},
      {"env RANK=0 " + kTrain + args,
       "combiner-train: error: environment: RANK and WORLD_SIZE go together"},
      {kLaunch + " -n 2 -- " + kTrain + args + " --set train.batch_size=6",
       "combiner-train: error: train.batch_size: 6 images per step must divide by WORLD_SIZE (2) "
       "x train.grad_accum (2) = 4"},
      {"env RANK=1 WORLD_SIZE=2 " + kEval + " --checkpoint x.ckpt",
       "combiner-eval: error: environment: WORLD_SIZE > 1 needs MASTER_ADDR"},
  };
  for (const auto& c : cases) {
    const auto r = run_shell(c.command);
    EXPECT_EQ(r.status, 1) << c.command << "\n" << r.output;
    // A whole line of rank 0's (launch.sh prefixes the other ranks' lines and adds its own).
    const bool whole_line =
        r.output.rfind(c.expected, 0) == 0 || r.output.find("\n" + c.expected) != std::string::npos;
    EXPECT_TRUE(whole_line) << c.command << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoints")));
}

TEST(NoGpuDistributedFailure, CudaWithoutAGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  TempDir dir;
  const auto r = run_shell(kTrain + " --config " + write_distributed_config(dir) +
                           " --set train.out_dir=" + dir.file("run") + " --set train.device=cuda");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.last_line().find("combiner-train: error: train.device: cuda asked for, but "
                               "LibTorch sees no CUDA device"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace combiner
