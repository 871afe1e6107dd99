// scripts/source-stamp.sh, which names the sources a GPU machine's carried binaries and wheel were
// built from (scripts/gpu-prebuild.sh, scripts/python-wheel.sh) so that scripts/test-gpu.sh can
// refuse stale ones: the same stamp for a copy of the tree without .git or git's ignored files (the
// GPU machine's copy), another one when a source changes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

// The stamp of the tree whose scripts/ holds the script.
std::string stamp_of(const std::string& root) {
  const auto run = run_shell(root + "/scripts/source-stamp.sh");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output.size(), 17u) << run.output;  // 16 hex digits and a newline
  return run.output;
}

// The stamped sources of the project, copied without what git ignores (python/build/).
void copy_sources(const fs::path& to) {
  const fs::path from(COMBINER_SOURCE_DIR);
  fs::create_directories(to / "scripts");
  fs::copy_file(from / "scripts/source-stamp.sh", to / "scripts/source-stamp.sh");
  fs::copy_file(from / "CMakeLists.txt", to / "CMakeLists.txt");
  for (const char* dir : {"cmake", "src"})
    fs::copy(from / dir, to / dir, fs::copy_options::recursive);
  fs::create_directories(to / "python");
  for (const auto& entry : fs::directory_iterator(from / "python"))
    if (entry.path().filename() != "build")
      fs::copy(entry.path(), to / "python" / entry.path().filename(), fs::copy_options::recursive);
}

TEST(SourceStamp, ACopyWithoutGitHasTheSameStampAndAChangedSourceAnother) {
  TempDir dir;
  const fs::path copy = dir.file("tree");
  copy_sources(copy);
  const std::string ours = stamp_of(COMBINER_SOURCE_DIR);
  EXPECT_EQ(stamp_of(copy.string()), ours);

  // What a build or Python leaves in the tree does not count, nor the documentation.
  std::ofstream(copy / "python/README.md", std::ios::app) << "\nmore\n";
  fs::create_directories(copy / "python/build/x");
  std::ofstream(copy / "python/build/x/cache.o") << "built";
  fs::create_directories(copy / "python/combiner_attention/__pycache__");
  std::ofstream(copy / "python/combiner_attention/__pycache__/bench.cpython-312.pyc") << "pyc";
  EXPECT_EQ(stamp_of(copy.string()), ours);

  // A changed kernel does, and so does a renamed file.
  std::ofstream(copy / "src/attention/fused/kernel_backward.cu", std::ios::app) << "\n";
  const std::string changed = stamp_of(copy.string());
  EXPECT_NE(changed, ours);
  fs::rename(copy / "src/attention/fused/kernel_backward.cu",
             copy / "src/attention/fused/kernel_backward2.cu");
  EXPECT_NE(stamp_of(copy.string()), changed);
}

}  // namespace
}  // namespace combiner
