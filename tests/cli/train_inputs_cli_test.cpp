// combiner-train as a new user meets it: --print-config shows every key with its meaning and
// default and reads nothing else, and a run whose test file is missing stops before its first
// step with one line naming the file, its run folder untouched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/run_binary.h"
#include "cli/tiny_config.h"
#include "config/config.h"
#include "config/load.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::run_binary;
using combiner::testing::TempDir;
namespace fs = std::filesystem;

int count_lines(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = 0; (at = text.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

TEST(PrintConfig, PrintsTheConfigWithOverridesAsYamlThatReadsBack) {
  TempDir dir;
  const std::string config = combiner::testing::tiny_config(dir);
  const std::vector<std::string> sets = {"train.lr=0.25", "model.attention.type=axial"};
  const auto r = run_binary("combiner-train",
                            "--config " + config + " --set " + sets[0] + " --set " + sets[1] +
                                " --print-config");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto printed = config::parse_config(r.output, "printed");
  const auto expected = config::read_config_with_overrides(config, sets);
  EXPECT_EQ(config::to_yaml(printed), config::to_yaml(expected));
  EXPECT_EQ(printed.train.lr, 0.25);
  EXPECT_EQ(printed.model.attention.type, "axial");
  EXPECT_EQ(printed.model.width, 16);  // from the file
  // Every key, each with its default.
  EXPECT_EQ(count_lines(r.output, "; default "), static_cast<int>(config::key_paths().size()))
      << r.output;
  EXPECT_NE(r.output.find("lr: 0.25  # peak learning rate"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; default 0.001"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run")));  // the run folder is never made
}

TEST(PrintConfig, WithoutAConfigPrintsTheDefaultsAndReadsNoData) {
  TempDir dir;
  const auto r = run_binary("combiner-train",
                            "--print-config --set data.dataset=images --set data.dir=" +
                                dir.file("nowhere") + " --set train.out_dir=" + dir.file("run"));
  ASSERT_EQ(r.status, 0) << r.output;
  auto expected = config::Config{};
  expected.data.dataset = "images";
  expected.data.dir = dir.file("nowhere");
  expected.train.out_dir = dir.file("run");
  EXPECT_EQ(config::to_yaml(config::parse_config(r.output, "printed")),
            config::to_yaml(expected));
  EXPECT_EQ(r.output.rfind("# combiner-train --print-config: the defaults with --set", 0), 0u)
      << r.output;
  EXPECT_TRUE(fs::is_empty(dir.path()));

  const auto bad = run_binary("combiner-train", "--print-config --set train.lr=-1");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.output,
            "combiner-train: error: defaults with --set overrides: train.lr: must be > 0, got "
            "-1.0\n");
  const auto none = run_binary("combiner-train", "");
  EXPECT_NE(none.status, 0);
  EXPECT_NE(none.output.find("--config is required"), std::string::npos) << none.output;
}

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
