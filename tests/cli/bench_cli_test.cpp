// combiner-bench end to end: bad input is one error line naming the flag or file and writes
// nothing; a tiny attention run gives ok and invalid rows; a tiny training benchmark prints its
// throughput without any dataset files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::read_lines;
using combiner::testing::run_binary;
using combiner::testing::TempDir;

const std::string kQuickConfig = std::string(COMBINER_SOURCE_DIR) + "/configs/fashion_mnist.yaml";

TEST(BenchCli, BadInputGivesOneLineErrorsAndNoFile) {
  TempDir dir;
  const std::string out = dir.file("out.csv");
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"attention --lengths 64 --variants full,nope --out " + out, "unknown variant 'nope'"},
      {"attention --lengths 64 --dtype float16 --out " + out, "--dtype"},
      {"attention --lengths 64 --variants full", "--out is required"},
      {"attention --lengths 0 --variants full --out " + out, "--lengths"},
      {"train --config /nonexistent/bench.yaml --steps 1", "/nonexistent/bench.yaml"},
      {"train --config " + kQuickConfig + " --set model.widht=16", "model.widht"},
      {"train --config " + kQuickConfig + " --steps 0", "--steps"},
      {"attention --lengths 64 --path fast --out " + out, "--path"},
      {"kernel-check --dims 0", "--dims"},
      {"kernel-check --variants full", "'full' has no fused kernel"},
      {"kernel-check --variants nope", "unknown variant 'nope'"},
      {"nope", "subcommand"},
  };
  for (const auto& c : cases) {
    auto r = run_binary("combiner-bench", c.args);
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.last_line().find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.last_line().find("combiner-bench: error: "), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(BenchCli, HelpStatesTheLayoutAndFlopRules) {
  auto attention = run_binary("combiner-bench", "attention --help");
  EXPECT_EQ(attention.status, 0) << attention.output;
  EXPECT_NE(attention.output.find("nearest sqrt(L)"), std::string::npos) << attention.output;
  EXPECT_NE(attention.output.find("bfloat16"), std::string::npos) << attention.output;
  auto train = run_binary("combiner-bench", "train --help");
  EXPECT_EQ(train.status, 0) << train.output;
  EXPECT_NE(train.output.find("FLOPs/step = 6 x"), std::string::npos) << train.output;
}

TEST(BenchCli, AttentionWritesOkAndInvalidRows) {
  TempDir dir;
  const std::string out = dir.file("attention.csv");
  // axial's W = 7 does not divide 64: an invalid row, no child. combiner-fixed's block is left
  // to the default rule: 8 = sqrt(64).
  auto r = run_binary("combiner-bench",
                      "attention --lengths 64 --variants axial,combiner-fixed --row-len 7 "
                      "--heads 1 --dim 4 --batch 1 --repeats 1 --threads 1 --backward "
                      "--dtype bfloat16 --out " +
                          out);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_EQ(lines[0],
            "variant,L,block,row_len,layout,dtype,device,pass,batch,heads,dim,threads,ms,peak_mib,"
            "launches,allocated_mib,kernel_mib,status,detail");
  EXPECT_EQ(
      lines[1].rfind("axial,64,,7,given,bfloat16,cpu,forward+backward,1,1,4,1,,,,,,invalid,", 0), 0u)
      << lines[1];
  EXPECT_EQ(lines[2].rfind("combiner-fixed,64,8,,auto:divisor-nearest-sqrt(L),bfloat16,cpu,forward+"
                           "backward,1,1,4,1,",
                           0),
            0u)
      << lines[2];
  EXPECT_NE(lines[2].find(",ok,"), std::string::npos) << lines[2] << "\n" << r.output;
}

// --count: each fused variant's row says its launches and allocated MiB, and a row per L gives
// flash's by definition (2 launches; o, lse, dq, dk, dv: 4 x 64 x 4 x 2 + 64 x 4 bytes).
TEST(BenchCli, AttentionCountsLaunchesAndBytes) {
  TempDir dir;
  const std::string out = dir.file("count.csv");
  auto r = run_binary("combiner-bench",
                      "attention --count --path fused --lengths 64 --variants combiner-fixed "
                      "--heads 1 --dim 4 --batch 1 --repeats 1 --threads 1 --backward "
                      "--dtype bfloat16 --out " +
                          out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("count of combiner-fixed L=64 forward+backward: 10 launches (8 fused"),
            std::string::npos)
      << r.output;
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 3u) << r.output;
  EXPECT_NE(lines[1].find(",10,"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(",ok,"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[2],
            "sdpa-flash,64,,,,bfloat16,cpu,forward+backward,1,1,4,1,,,2,0.0,0.0,definition,one "
            "forward and one backward launch; o; lse; dq; dk; dv");
}

TEST(BenchCli, TrainSmokePrintsTokensPerSecond) {
  TempDir dir;
  const std::string out = dir.file("train.csv");
  auto r = run_binary("combiner-bench",
                      "train --config " + kQuickConfig +
                          " --steps 2 --warmup 0 --threads 1 --matmul-size 256"
                          " --set model.layers=1 --set model.width=16 --set model.heads=2"
                          " --set train.batch_size=2 --set data.dir=/nonexistent --out " +
                          out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(" tokens/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MFU "), std::string::npos) << r.output;
  const auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].rfind("fashion_mnist,combiner-axial-rowmajor,784,2,1,16,2,", 0), 0u)
      << lines[1];
}

// The CPU build checks the kernels' CPU model: every small case of one variant at D = 32 passes,
// one table line each, and the exit status says so.
TEST(BenchCli, KernelCheckOnTheCpuModelPasses) {
  auto r =
      run_binary("combiner-bench",
                 "kernel-check --device cpu --dims 32 --variants combiner-fixed --sizes small");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the kernels' CPU model"), std::string::npos) << r.output;
  size_t pass = 0;
  for (size_t at = 0; (at = r.output.find(" PASS", at)) != std::string::npos; ++at) ++pass;
  EXPECT_EQ(pass, 9u) << r.output;  // 3 layouts x float32, float64, bfloat16
  EXPECT_NE(r.output.find(" bfloat16 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("FAIL"), std::string::npos) << r.output;
  EXPECT_EQ(r.last_line(), "kernel-check: 9 of 9 cases pass") << r.output;
}

// Where the CUDA kernels are not built, kernel-check --device emulated runs their own source on
// the SIMT emulator (CUDA's dtypes); where they are, it is refused in one line.
TEST(BenchCli, KernelCheckOnTheEmulatorRunsTheCudaSource) {
  auto r = run_binary("combiner-bench",
                      "kernel-check --device emulated --dims 64 --variants combiner-axial-vertical "
                      "--sizes small");
#ifdef COMBINER_WITH_EMULATED_KERNELS
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the CUDA kernels' source on the CPU's SIMT emulator"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" float32 "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" bfloat16 "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(" float64 "), std::string::npos) << r.output;  // no CUDA kernel has it
  EXPECT_EQ(r.last_line(), "kernel-check: 4 of 4 cases pass") << r.output;
#else
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.last_line().find("--device emulated: this build has the real CUDA kernels"),
            std::string::npos)
      << r.output;
#endif
}

}  // namespace
}  // namespace combiner
