// combiner-inspect end to end: .npy in, the fast path's output out (checked against the dense
// reference), pictures written, and bad inputs refused with one line naming the flag or file.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tools/inspect.h"
#include "attention/reference.h"
#include "cli/run_binary.h"
#include "test_utils.h"
#include "util/npy.h"

namespace combiner {
namespace {

using combiner::testing::TempDir;

using InspectOutput = combiner::testing::BinaryRun;

InspectOutput run_inspect(const std::string& args) {
  return combiner::testing::run_binary("combiner-inspect", "--threads 1 " + args);
}

bool is_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in && std::string(magic + 1, 3) == "PNG";
}

class InspectCli : public ::testing::Test {
 protected:
  static constexpr int64_t kHeads = 2, kLength = 24, kDim = 6, kValueDim = 5;
  void SetUp() override {
    torch::manual_seed(3);
    q_ = torch::randn({kHeads, kLength, kDim});
    k_ = torch::randn({kHeads, kLength, kDim});
    v_ = torch::randn({kHeads, kLength, kValueDim});
    util::save_npy(dir_.file("q.npy"), q_);
    util::save_npy(dir_.file("k.npy"), k_);
    util::save_npy(dir_.file("v.npy"), v_);
  }
  std::string inputs() const {
    return "--q " + dir_.file("q.npy") + " --k " + dir_.file("k.npy") + " --v " +
           dir_.file("v.npy");
  }
  TempDir dir_;
  torch::Tensor q_, k_, v_;
};

TEST_F(InspectCli, OutputMatchesTheDenseReference) {
  for (const std::string type : {"full",
                                 "fixed",
                                 "logsparse",
                                 "combiner-fixed",
                                 "combiner-logsparse",
                                 "combiner-axial-rowmajor",
                                 "combiner-mixture"}) {
    for (const std::string abstraction : {"max", "mean"}) {
      const auto out = dir_.file(type + "_" + abstraction + ".npy");
      auto r = run_inspect("--variant " + type + " " + inputs() + " --block 5 --row-len 6" +
                           " --abstraction " + abstraction + " --out " + out);
      ASSERT_EQ(r.status, 0) << r.output;
      const auto fast = util::load_npy(out);
      ASSERT_EQ(fast.sizes(), (std::vector<int64_t>{kHeads, kLength, kValueDim}));
      ASSERT_EQ(fast.scalar_type(), torch::kFloat);
      const attention::AttentionOptions options{type, 5, 6, abstraction};
      const auto a = attention::effective_matrix(options, q_.unsqueeze(0), k_.unsqueeze(0), {});
      const auto expected = torch::matmul(a, v_.unsqueeze(0).to(torch::kDouble)).squeeze(0);
      EXPECT_LT((fast.to(torch::kDouble) - expected).abs().max().item<double>(), 1e-5)
          << type << "/" << abstraction;
    }
  }
}

TEST_F(InspectCli, DeepSetsOutputMatchesTheReferenceOfTheSameMaps) {
  const auto out = dir_.file("deepsets.npy");
  auto r = run_inspect("--variant combiner-axial-vertical " + inputs() +
                       " --row-len 4 --abstraction deepsets-max --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto options =
      attention::inspect_options("combiner-axial-vertical", 0, 4, "deepsets-max", kLength);
  const attention::HeadInputs in{q_, k_, v_};
  const auto expected = attention::run_reference(options, attention::run_fast(options, in), in);
  EXPECT_LT((util::load_npy(out).to(torch::kDouble) - expected).abs().max().item<double>(), 1e-5);
}

TEST_F(InspectCli, WritesPictures) {
  const auto matrix = dir_.file("matrix.png"), pattern = dir_.file("pattern.png");
  auto r = run_inspect("--variant combiner-mixture " + inputs() + " --row-len 6 --out " +
                       dir_.file("o.npy") + " --png " + matrix);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(is_png(matrix));
  r = run_inspect("--pattern combiner-logsparse --length 64 --png " + pattern + " --scale 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(is_png(pattern));
}

TEST_F(InspectCli, BadInputsGiveOneLineErrorsAndNoOutput) {
  util::save_npy(dir_.file("ints.npy"), torch::zeros({kHeads, kLength, kValueDim}, torch::kLong));
  util::save_npy(dir_.file("short.npy"), torch::randn({kHeads, kLength - 1, kDim}));
  util::save_npy(dir_.file("long_q.npy"), torch::randn({1, 1040, 2}));
  const std::string q = " --q " + dir_.file("q.npy"), k = " --k " + dir_.file("k.npy"),
                    v = " --v " + dir_.file("v.npy");
  const std::string out = dir_.file("refused.npy");
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"--variant full --q /nonexistent/q.npy" + k + v, "/nonexistent/q.npy"},
      {"--variant full" + q + k + " --v " + dir_.file("ints.npy"), "--v"},
      {"--variant full" + q + " --k " + dir_.file("short.npy") + v, "--k"},
      {"--variant axial" + q + k + v + " --row-len 5", "--row-len"},
      {"--variant combiner-axial-horizontal" + q + k + v, "--row-len"},
      {"--variant combiner-fixed" + q + k + v, "--block"},
      {"--variant nope" + q + k + v, "--variant"},
      {"--variant full" + q + k + v + " --abstraction median", "--abstraction"},
      {"--variant full --q " + dir_.file("long_q.npy") + " --k " + dir_.file("long_q.npy") +
           " --v " + dir_.file("long_q.npy") + " --png " + dir_.file("big.png"),
       "--png"},
      {"--pattern axial --row-len 8 --png " + dir_.file("p.png"), "--length"},
      {"--pattern axial --length 64 --png " + dir_.file("p.png"), "--row-len"},
  };
  for (const auto& c : cases) {
    const bool variant_mode = c.args.rfind("--variant", 0) == 0;
    auto r = run_inspect(c.args + (variant_mode ? " --out " + out : ""));
    EXPECT_EQ(r.status, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.last_line().find(c.expected), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.last_line().find("combiner-inspect: error: "), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("big.png"))) << c.args;
    EXPECT_FALSE(std::filesystem::exists(dir_.file("p.png"))) << c.args;
  }
}

}  // namespace
}  // namespace combiner
