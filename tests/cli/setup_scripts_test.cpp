// scripts/setup-cuda-deps.sh where the disk cannot hold pip's torch: one line naming the folder,
// its free GiB and what the environment needs, exit 1, and no environment begun.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::run_shell;
using combiner::testing::TempDir;

TEST(SetupScripts, CudaDepsRefusesADiskTooSmallBeforeInstallingAnything) {
  TempDir dir;
  const std::string venv = dir.file("venv");
  const auto run = run_shell("COMBINER_VENV=" + venv + " COMBINER_VENV_NEED_GIB=1000000 " +
                             std::string(COMBINER_SOURCE_DIR) + "/scripts/setup-cuda-deps.sh");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("GiB free; pip's torch 2.11.0 with its CUDA libraries needs about "
                            "1000000 GiB"),
            std::string::npos)
      << run.output;
  EXPECT_EQ(run.output.find("installing"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(venv));
}

}  // namespace
}  // namespace combiner
