// combiner-train as a new user meets it: a run whose test file is missing stops before its first
// step with one line naming the file, its run folder untouched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/run_binary.h"
#include "cli/tiny_config.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::run_binary;
using combiner::testing::TempDir;
namespace fs = std::filesystem;

// A Fashion-MNIST folder holding its training file alone (20 images, uncompressed idx3).
std::string train_file_only(const TempDir& dir) {
  const std::string folder = dir.file("fashion");
  fs::create_directory(folder);
  std::vector<char> bytes;
  for (const uint32_t v : {2051u, 20u, 28u, 28u})
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(char(v >> shift));
  bytes.resize(bytes.size() + 20 * 784, 3);
  std::ofstream(folder + "/train-images-idx3-ubyte", std::ios::binary)
      .write(bytes.data(), std::streamsize(bytes.size()));
  return folder;
}

TEST(TrainInputs, MissingTestFileStopsBeforeTheFirstStepWithOneLine) {
  TempDir dir;
  const std::string data = train_file_only(dir);
  const std::string config = combiner::testing::tiny_config(dir);
  const std::string args = "--config " + config + " --set data.dir=" + data;
  for (const bool existing : {false, true}) {
    if (existing) {
      fs::create_directory(dir.file("run"));
      std::ofstream(dir.file("run/notes.txt")) << "mine";
    }
    const auto r = run_binary("combiner-train", args + " --set train.final_test=true");
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_EQ(r.output,
              "combiner-train: error: fashion_mnist: neither 't10k-images-idx3-ubyte.gz' nor "
              "'t10k-images-idx3-ubyte' in '" +
                  data + "'\n");
    if (existing)
      EXPECT_EQ(std::vector<fs::path>(fs::directory_iterator(dir.file("run")), {}),
                std::vector<fs::path>{dir.file("run/notes.txt")});
    else
      EXPECT_FALSE(fs::exists(dir.file("run")));
  }
  // The same folder trains without the final test.
  const auto r = run_binary("combiner-train", args);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(r.last_line().rfind("checkpoint: ", 0), 0u) << r.output;
}

}  // namespace
}  // namespace combiner
