// The profiler table: the ops a piece of work runs, counted per name, and the table's shape (no
// timing assertions: only that times are there and ordered).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cstdio>
#include <fstream>

#include "tools/profile.h"

namespace combiner::tools {
namespace {

TEST(Profile, CountsTheOpsOfTheWorkPerName) {
  auto a = torch::randn({64, 64}), b = torch::randn({64, 64});
  // Debian's LibTorch has no Kineto: the table works there, a trace does not.
  const std::string trace =
      can_save_traces() ? ::testing::TempDir() + "profile_trace.json" : std::string();
  const auto rows = profile(
      [&] {
        for (int i = 0; i < 3; ++i) torch::mm(a, b);
        torch::relu(a);
      },
      /*cuda=*/false,
      trace);
  auto find = [&](const std::string& name) {
    for (const auto& r : rows)
      if (r.name == name) return r;
    return ProfileRow{};
  };
  EXPECT_EQ(find("aten::mm").calls, 3);
  EXPECT_EQ(find("aten::relu").calls, 1);
  EXPECT_FALSE(find("aten::mm").kernel);
  EXPECT_EQ(find("aten::sigmoid").calls, 0);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].total_ms, rows[i].total_ms);
  if (!trace.empty()) {
    EXPECT_TRUE(std::ifstream(trace).good());
    std::remove(trace.c_str());
  }

  // Per step: 3 calls over 3 steps is 1.0 a step; no GPU section without kernels. The table is
  // made of two rows picked by name, not the two slowest: which op took longest is up to the
  // machine's load (relu, called first, has been seen to outlast three small mms).
  const std::string table = profile_table({find("aten::mm"), find("aten::relu")}, 2, 3);
  EXPECT_EQ(table.find("GPU kernels"), std::string::npos);
  EXPECT_NE(table.find("CPU ops"), std::string::npos);
  EXPECT_NE(table.find("     1.0 "), std::string::npos) << table;
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2 + 2) << table;  // 2 heading lines
}

TEST(Profile, AFailingWorkLeavesTheProfilerOff) {
  EXPECT_THROW(profile([] { throw std::runtime_error("boom"); }, false, ""), std::runtime_error);
  // A second profile starts cleanly.
  const auto rows = profile([] { torch::ones({2}).sum(); }, false, "");
  EXPECT_FALSE(rows.empty());
}

}  // namespace
}  // namespace combiner::tools
