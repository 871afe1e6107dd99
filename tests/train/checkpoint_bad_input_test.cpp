// The bad-input catalogue for checkpoints and run folders (docs/RELIABILITY.md): the disk
// filling up while a checkpoint is written (RLIMIT_FSIZE in a forked child, SIGXFSZ ignored so
// write() fails with EFBIG), run and checkpoint folders that are not writable, and checkpoints
// of another architecture or attention variant. Errors name the file and the reason, and
// nothing is left under the final name.
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "child_process.h"
#include "config/config.h"
#include "model/transformer.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

namespace combiner::train {
namespace {

using combiner::testing::expect_contains;
using combiner::testing::file_size_limit;
using combiner::testing::message_in_child;
using combiner::testing::TempDir;
using combiner::testing::unprivileged;
namespace fs = std::filesystem;

// Folders under the temp dir that uid 65534 can enter but not write.
void open_to_others(const std::string& path) {
  fs::permissions(path, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
}
void read_only(const std::string& path) {
  fs::permissions(path,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                      fs::perms::others_exec);
}

Checkpoint checkpoint_of(int64_t step, int64_t floats) {
  Checkpoint c;
  c.step = step;
  c.model = {{"w", torch::full({floats}, static_cast<float>(step))}};
  c.rng_state = torch::zeros({4}, torch::kUInt8);
  return c;
}

TEST(CheckpointBadInput, DiskFullWhileSavingKeepsThePreviousCheckpoint) {
  TempDir dir;
  const auto previous = checkpoint_path(dir.path(), 10);
  save_checkpoint(previous, checkpoint_of(10, 16));
  const auto next = checkpoint_path(dir.path(), 20);
  // 1 MB of weights against a 256 KB file-size limit: the write fails part-way.
  const std::string message = message_in_child(
      file_size_limit(256 << 10), [&] { save_checkpoint(next, checkpoint_of(20, 1 << 18)); });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  expect_contains(message,
                  {"checkpoint: cannot write '" + next + "'",
                   "File too large",
                   "the previous checkpoints are kept"});
  EXPECT_FALSE(fs::exists(next));
  EXPECT_FALSE(fs::exists(next + ".tmp"));
  EXPECT_EQ(list_checkpoints(dir.path()), std::vector<std::string>{previous});
  EXPECT_EQ(load_checkpoint(previous).step, 10);

  // Rewriting a checkpoint in place (same name) fails the same way and keeps the old content.
  const std::string again = message_in_child(
      file_size_limit(256 << 10), [&] { save_checkpoint(previous, checkpoint_of(30, 1 << 18)); });
  expect_contains(again, {previous, "File too large"});
  EXPECT_EQ(load_checkpoint(previous).step, 10);
  EXPECT_FALSE(fs::exists(previous + ".tmp"));
}

TEST(CheckpointBadInput, ReadOnlyCheckpointFolderIsNamed) {
  TempDir dir;
  open_to_others(dir.path());
  const auto previous = checkpoint_path(dir.path(), 1);
  save_checkpoint(previous, checkpoint_of(1, 4));
  const std::string folder = fs::path(previous).parent_path().string();
  read_only(folder);
  const auto next = checkpoint_path(dir.path(), 2);
  const std::string message =
      message_in_child(unprivileged(folder), [&] { save_checkpoint(next, checkpoint_of(2, 4)); });
  fs::permissions(folder, fs::perms::owner_all);
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  expect_contains(message,
                  {"checkpoint: cannot write '" + next + "'",
                   "Permission denied",
                   "previous checkpoints are kept"});
  EXPECT_FALSE(fs::exists(next));
  EXPECT_EQ(load_checkpoint(previous).step, 1);
}

TEST(CheckpointBadInput, RunFolderUnderAFileCannotBeCreated) {
  TempDir dir;
  std::ofstream(dir.file("taken")) << "a file, not a folder";
  const auto config = tiny_run(dir.file("taken/run"), 1);
  try {
    run_training(config, {});
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    expect_contains(e.what(), {dir.file("taken/run"), "cannot create run folder"});
  }
  EXPECT_EQ(std::ifstream(dir.file("taken")).get(), 'a');
}

TEST(CheckpointBadInput, ReadOnlyRunFolderIsRefusedBeforeTraining) {
  TempDir dir;
  open_to_others(dir.path());
  const std::string run = dir.file("run");
  fs::create_directory(run);
  read_only(run);
  const auto config = tiny_run(run, 1);
  const std::string message =
      message_in_child(unprivileged(run), [&] { run_training(config, {}); });
  fs::permissions(run, fs::perms::owner_all);
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  expect_contains(message, {run + "/config.yaml", "cannot write", "writable"});
  EXPECT_TRUE(fs::is_empty(run));
}

model::TransformerOptions tiny_model(const std::string& attention, const std::string& abstraction) {
  model::TransformerOptions o;
  o.layers = 1;
  o.width = 16;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {2, 2, 3};
  o.attention.type = attention;
  o.attention.abstraction = abstraction;
  o.attention.block = 6;
  o.attention.row_len = 6;
  return o;
}

std::string restore_message(const model::TransformerOptions& saved,
                            const model::TransformerOptions& loaded) {
  model::ImageTransformer from(saved);
  model::ImageTransformer into(loaded);
  try {
    restore_model(*into, capture_model(*from), "x.ckpt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "NO ERROR";
}

TEST(CheckpointBadInput, AnotherAttentionVariantNamesTheTensors) {
  // A DeepSets summary owns learned maps that full attention has no place for, and back.
  const auto combiner = tiny_model("combiner-axial-rowmajor", "deepsets-max");
  const auto full = tiny_model("full", "max");
  expect_contains(restore_message(combiner, full),
                  {"x.ckpt",
                   "another architecture or attention variant",
                   "unexpected blocks.0.attention.phi_key"});
  expect_contains(restore_message(full, combiner),
                  {"x.ckpt", "missing blocks.0.attention.phi_key"});
  // deepsets-mean learns the same maps as deepsets-max, and plain max none: the tensors of
  // combiner-axial-rowmajor/max and full are the same, so restore_model cannot tell them apart.
  EXPECT_EQ(restore_message(tiny_model("combiner-axial-rowmajor", "max"), full), "NO ERROR");
}

TEST(CheckpointBadInput, ArchitectureKeysThatTheTensorsCannotShowAreCompared) {
  auto saved = tiny_run("runs/a", 1);
  saved.model.attention.type = "combiner-axial-rowmajor";
  Checkpoint c;
  c.config_yaml = config::to_yaml(saved);
  auto now = saved;
  EXPECT_NO_THROW(check_same_architecture(c, now, "x.ckpt"));
  now.train.lr = 0.5;  // not architecture
  now.model.dropout = 0.1;
  EXPECT_NO_THROW(check_same_architecture(c, now, "x.ckpt"));
  now.model.attention.type = "full";
  now.model.heads = 4;
  try {
    check_same_architecture(c, now, "x.ckpt");
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    expect_contains(e.what(),
                    {"x.ckpt",
                     "model.heads is 2 in the checkpoint, 4 here",
                     "model.attention.type is 'combiner-axial-rowmajor' in the checkpoint, "
                     "'full' here"});
  }
}

}  // namespace
}  // namespace combiner::train
