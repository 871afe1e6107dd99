// Every input of a run is checked before its first step: a missing or damaged file of any split
// it will read (the test split too, when train.final_test) stops run_training with the file's
// name, and the run folder is left as it was: not created when it did not exist, and nothing
// (config.yaml, metrics.jsonl, tb/) written into one that did.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "child_process.h"
#include "test_utils.h"
#include "train/tiny_run.h"
#include "train/trainer.h"
#include "util/image_io.h"

namespace combiner::train {
namespace {

using combiner::testing::TempDir;
namespace fs = std::filesystem;

// An uncompressed idx3 file of `count` 28 x 28 images (Fashion-MNIST's format), `short_by` bytes
// cut off its end.
void write_idx(const std::string& path, uint32_t count, size_t short_by = 0) {
  std::vector<uint8_t> bytes;
  for (const uint32_t v : {2051u, count, 28u, 28u})
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(v >> shift));
  for (uint32_t i = 0; i < count * 784; ++i) bytes.push_back(uint8_t(i * 7));
  bytes.resize(bytes.size() - short_by);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// What a folder holds, names relative to it ("" for a folder that does not exist).
std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> names;
  if (!fs::exists(dir)) return {""};
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    names.insert(fs::relative(entry.path(), dir).string());
  return names;
}

// The message run_training throws for config, or "NO ERROR".
std::string refusal(const config::Config& config) {
  try {
    run_training(config, {});
  } catch (const std::exception& e) {
    return e.what();
  }
  return "NO ERROR";
}

// tiny_run on a Fashion-MNIST folder of our own, with the final test on.
config::Config run_on(const std::string& data_dir, const std::string& out_dir) {
  auto c = tiny_run(out_dir, 2);
  c.data.dir = data_dir;
  c.train.final_test = true;
  return c;
}

TEST(RunInputs, MissingTestFileStopsTheRunBeforeItsFolderIsMade) {
  TempDir dir;
  fs::create_directory(dir.file("data"));
  write_idx(dir.file("data/train-images-idx3-ubyte"), 20);
  const auto c = run_on(dir.file("data"), dir.file("run"));
  const std::string message = refusal(c);
  EXPECT_NE(message.find("t10k-images-idx3-ubyte"), std::string::npos) << message;
  EXPECT_NE(message.find(dir.file("data")), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.file("run")));

  // Without the final test the same folder trains: the refusal was the test split's.
  auto without = c;
  without.train.final_test = false;
  EXPECT_EQ(refusal(without), "NO ERROR");
  EXPECT_TRUE(fs::exists(dir.file("run/config.yaml")));
}

TEST(RunInputs, TruncatedTestFileLeavesAnExistingRunFolderAsItWas) {
  TempDir dir;
  fs::create_directory(dir.file("data"));
  write_idx(dir.file("data/train-images-idx3-ubyte"), 20);
  write_idx(dir.file("data/t10k-images-idx3-ubyte"), 5, 100);  // 100 bytes short
  fs::create_directories(dir.file("run/notes"));
  std::ofstream(dir.file("run/notes/mine.txt")) << "kept";
  const auto before = listing(dir.file("run"));
  const std::string message = refusal(run_on(dir.file("data"), dir.file("run")));
  EXPECT_NE(message.find(dir.file("data/t10k-images-idx3-ubyte")), std::string::npos) << message;
  EXPECT_NE(message.find("header says 5 images"), std::string::npos) << message;
  EXPECT_EQ(listing(dir.file("run")), before);  // no config.yaml, metrics.jsonl or tb/
}

TEST(RunInputs, MissingDataFolderWritesNoConfig) {
  TempDir dir;
  fs::create_directory(dir.file("run"));
  const std::string message = refusal(run_on(dir.file("nowhere"), dir.file("run")));
  EXPECT_NE(message.find(dir.file("nowhere")), std::string::npos) << message;
  EXPECT_TRUE(fs::is_empty(dir.file("run")));
  const std::string deeper = refusal(run_on(dir.file("nowhere"), dir.file("a/b/run")));
  EXPECT_NE(deeper.find(dir.file("nowhere")), std::string::npos) << deeper;
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

TEST(RunInputs, ImageNetWithoutItsValidFolderIsRefusedAtStart) {
  // The PNG layout with train/ alone: the test split (valid/) is missing.
  TempDir dir;
  fs::create_directories(dir.file("data/train"));
  for (int i = 0; i < 3; ++i)
    util::write_png(dir.file("data/train/" + std::to_string(i) + ".png"),
                    torch::full({64, 64, 3}, i * 40, torch::kUInt8));
  auto c = tiny_run(dir.file("run"), 2);
  c.data.dataset = "imagenet64";
  c.data.dir = dir.file("data");
  c.data.val_size = 1;
  c.data.height = c.data.width = c.data.channels = c.data.bits = 0;
  c.model.attention.block = c.model.attention.row_len = 0;
  c.train.final_test = true;
  config::validate(c);
  const std::string message = refusal(c);
  EXPECT_NE(message.find(dir.file("data/valid")), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(dir.file("run")));
}

TEST(RunInputs, AFailedConfigWriteTakesBackTheFoldersItMade) {
  // config.yaml is the run's first write; here it fails (a 256-byte file-size limit, as on a full
  // disk), and the folders made for it are removed again.
  TempDir dir;
  const auto c = tiny_run(dir.file("a/b/run"), 1);
  const std::string message = combiner::testing::message_in_child(
      combiner::testing::file_size_limit(256), [&] { run_training(c, {}); });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find("cannot write '" + dir.file("a/b/run/config.yaml") + "'"),
            std::string::npos)
      << message;
  EXPECT_FALSE(fs::exists(dir.file("a")));
}

}  // namespace
}  // namespace combiner::train
