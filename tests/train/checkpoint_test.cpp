// Checkpoints: round trip, validation of damaged files, architecture mismatches, and exact
// resume (N steps, stop, N more == 2N straight, parameters identical on CPU).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "model/transformer.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

namespace combiner::train {
namespace {

using combiner::testing::message_of;
using combiner::testing::TempDir;

model::TransformerOptions tiny_model(int64_t width = 16) {
  model::TransformerOptions o;
  o.layers = 1;
  o.width = width;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {2, 2, 3};
  o.attention.block = 6;
  o.attention.row_len = 6;
  return o;
}

TEST(Checkpoint, RoundTripKeepsEveryField) {
  TempDir dir;
  torch::manual_seed(0);
  model::ImageTransformer model(tiny_model());
  Checkpoint c;
  c.config_yaml = "data:\n  dataset: cifar10\n";
  c.step = 42;
  c.samples_seen = 1234;
  c.model = capture_model(*model);
  c.optimizer = {'a', 'b', '\0', 'c'};
  c.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  const auto path = checkpoint_path(dir.path(), 42);
  save_checkpoint(path, c);
  auto back = load_checkpoint(path);
  EXPECT_EQ(back.config_yaml, c.config_yaml);
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.samples_seen, 1234);
  EXPECT_EQ(back.optimizer, c.optimizer);
  EXPECT_TRUE(torch::equal(back.rng_state, c.rng_state));
  torch::manual_seed(99);
  model::ImageTransformer other(tiny_model());
  restore_model(*other, back.model, path);
  for (const auto& [name, tensor] : capture_model(*model)) {
    bool found = false;
    for (const auto& [n2, t2] : capture_model(*other))
      if (n2 == name) found = torch::equal(tensor, t2);
    EXPECT_TRUE(found) << name;
  }
  EXPECT_EQ(list_checkpoints(dir.path()), std::vector<std::string>{path});
}

TEST(Checkpoint, DamagedFilesAreRefusedByName) {
  TempDir dir;
  model::ImageTransformer model(tiny_model());
  Checkpoint c;
  c.model = capture_model(*model);
  c.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  const auto path = dir.file("good.ckpt");
  save_checkpoint(path, c);
  const auto size = std::filesystem::file_size(path);

  const auto truncated = dir.file("truncated.ckpt");
  std::filesystem::copy_file(path, truncated);
  std::filesystem::resize_file(truncated, size / 2);
  auto msg = message_of([&] { load_checkpoint(truncated); });
  EXPECT_NE(msg.find(truncated), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  const auto flipped = dir.file("flipped.ckpt");
  std::filesystem::copy_file(path, flipped);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 10));
    f.put('\x5a');
  }
  msg = message_of([&] { load_checkpoint(flipped); });
  EXPECT_NE(msg.find("checksum"), std::string::npos) << msg;

  const auto other = dir.file("other.ckpt");
  std::ofstream(other) << "not a checkpoint at all";
  msg = message_of([&] { load_checkpoint(other); });
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;

  msg = message_of([&] { load_checkpoint(dir.file("missing.ckpt")); });
  EXPECT_NE(msg.find("missing.ckpt"), std::string::npos) << msg;
}

TEST(Checkpoint, ArchitectureMismatchNamesTheTensors) {
  model::ImageTransformer small(tiny_model(16));
  model::ImageTransformer wide(tiny_model(32));
  const auto msg = message_of([&] { restore_model(*wide, capture_model(*small), "x.ckpt"); });
  EXPECT_NE(msg.find("x.ckpt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token_embed.weight has shape [257, 16], model expects [257, 32]"),
            std::string::npos)
      << msg;
}

TEST(Checkpoint, PruneKeepsTheNewest) {
  TempDir dir;
  Checkpoint c;
  c.rng_state = torch::zeros({1}, torch::kUInt8);
  for (int64_t step : {10, 20, 30, 40}) save_checkpoint(checkpoint_path(dir.path(), step), c);
  prune_checkpoints(dir.path(), 2);
  EXPECT_EQ(
      list_checkpoints(dir.path()),
      (std::vector<std::string>{checkpoint_path(dir.path(), 30), checkpoint_path(dir.path(), 40)}));
}

std::vector<std::pair<std::string, torch::Tensor>> final_parameters(const std::string& path) {
  return load_checkpoint(path).model;
}

TEST(Resume, StopAndResumeEqualsStraightRun) {
  TempDir dir;
  const auto straight = run_training(tiny_run(dir.file("straight"), 6), {});

  // The same 6-step run (same schedule), interrupted after 3 updates and resumed.
  const auto resumed_config = tiny_run(dir.file("resumed"), 6);
  RunOptions interrupted;
  interrupted.stop_after = 3;
  const auto stopped = run_training(resumed_config, interrupted);
  EXPECT_EQ(load_checkpoint(stopped.final_checkpoint).step, 3);
  RunOptions resume;
  resume.resume = true;
  const auto resumed = run_training(resumed_config, resume);

  const auto a = final_parameters(straight.final_checkpoint);
  const auto b = final_parameters(resumed.final_checkpoint);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

TEST(Resume, FreshRunRefusesAFolderWithCheckpoints) {
  TempDir dir;
  run_training(tiny_run(dir.file("run"), 1), {});
  const auto msg = message_of([&] { run_training(tiny_run(dir.file("run"), 2), {}); });
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
}

TEST(Resume, SkipsACorruptNewestCheckpoint) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 4);
  c.train.checkpoint_every = 2;
  const auto done = run_training(c, {});
  // Damage the final checkpoint: resume must fall back to step 2 and redo steps 3 and 4.
  std::filesystem::resize_file(done.final_checkpoint, 100);
  RunOptions resume;
  resume.resume = true;
  const auto redone = run_training(c, resume);
  EXPECT_EQ(load_checkpoint(redone.final_checkpoint).step, 4);
}

}  // namespace
}  // namespace combiner::train
