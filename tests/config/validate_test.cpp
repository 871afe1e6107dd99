// validate() and load_config(): every range rule names its key and the value seen, dataset-
// dependent defaults resolve to one image row, and file errors are prefixed with the path.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "config/load.h"
#include "config/test_util.h"
#include "data/dataset.h"

namespace combiner::config {
namespace {

using testing::expect_invalid;
using testing::TempDir;

Config with(std::initializer_list<std::string> overrides) {
  Config c;
  for (const auto& o : overrides) apply_override(c, o);
  return c;
}

TEST(ConfigValidate, DefaultsAreValidAndResolved) {
  Config c;
  EXPECT_NO_THROW(validate(c));
  EXPECT_EQ(c.data.dir, data::default_dir("fashion_mnist"));
  EXPECT_EQ(c.model.attention.block, 28);
  EXPECT_EQ(c.model.attention.row_len, 28);
}

TEST(ConfigValidate, IsIdempotentAndResolvedConfigRoundTrips) {
  Config c;
  validate(c);
  const std::string once = to_yaml(c);
  Config read = parse_config(once, "resolved");
  validate(read);
  EXPECT_EQ(to_yaml(read), once);
}

TEST(ConfigValidate, ResolvesBlockAndRowLenToOneImageRowPerDataset) {
  const std::vector<std::pair<std::string, int64_t>> rows = {
      {"fashion_mnist", 28}, {"cifar10", 96}, {"imagenet64", 192}};
  for (const auto& [dataset, row] : rows) {
    Config c = with({"data.dataset=" + dataset});
    validate(c);
    EXPECT_EQ(c.model.attention.block, row) << dataset;
    EXPECT_EQ(c.model.attention.row_len, row) << dataset;
    EXPECT_EQ(c.data.dir, data::default_dir(dataset)) << dataset;
  }
}

TEST(ConfigValidate, KeepsExplicitBlockRowLenAndDir) {
  Config c = with({"data.dataset=cifar10",
                   "data.dir=/data/c10",
                   "model.attention.block=32",
                   "model.attention.row_len=48"});
  validate(c);
  EXPECT_EQ(c.data.dir, "/data/c10");
  EXPECT_EQ(c.model.attention.block, 32);
  EXPECT_EQ(c.model.attention.row_len, 48);
}

TEST(ConfigValidate, RowLenThatDoesNotDivideLengthIsRejected) {
  // fashion_mnist: L = 784; axial is a layout that uses row_len.
  Config c = with({"model.attention.type=axial", "model.attention.row_len=100"});
  expect_invalid([&] { validate(c); }, {"model.attention.row_len", "784", "100"});
}

TEST(ConfigValidate, UnknownVariantOrAbstractionIsRejected) {
  Config type = with({"model.attention.type=sparse-ish"});
  expect_invalid([&] { validate(type); }, {"model.attention.type", "'sparse-ish'", "full"});
  Config abstraction = with({"model.attention.abstraction=median"});
  expect_invalid([&] { validate(abstraction); },
                 {"model.attention.abstraction", "'median'", "deepsets-mean"});
}

TEST(ConfigValidate, EveryRangeNamesKeyAllowedRangeAndValue) {
  struct Case {
    std::vector<std::string> overrides;
    std::string message;  // expected start of what()
  };
  const std::vector<Case> cases = {
      {{"model.layers=0"}, "model.layers: must be in [1, 1024], got 0"},
      {{"model.layers=1025"}, "model.layers: must be in [1, 1024], got 1025"},
      {{"model.width=0"}, "model.width: must be > 0, got 0"},
      {{"model.heads=0"}, "model.heads: must be > 0, got 0"},
      {{"model.width=130"}, "model.width: must be divisible by model.heads (4), got 130"},
      {{"model.mlp_ratio=-1"}, "model.mlp_ratio: must be > 0, got -1"},
      {{"model.dropout=1"}, "model.dropout: must be in [0, 1), got 1.0"},
      {{"model.dropout=-0.1"}, "model.dropout: must be in [0, 1), got -0.1"},
      {{"model.attention.block=-1"}, "model.attention.block: must be >= 0, got -1"},
      {{"model.attention.row_len=-2"}, "model.attention.row_len: must be >= 0, got -2"},
      {{"train.steps=0"}, "train.steps: must be > 0, got 0"},
      {{"train.batch_size=0"}, "train.batch_size: must be > 0, got 0"},
      {{"train.grad_accum=0"}, "train.grad_accum: must be > 0, got 0"},
      {{"train.grad_accum=3"}, "train.grad_accum: must divide train.batch_size (16), got 3"},
      {{"train.lr=0"}, "train.lr: must be > 0, got 0.0"},
      {{"train.min_lr=-1e-6"}, "train.min_lr: must be >= 0, got -1e-06"},
      {{"train.min_lr=0.01"}, "train.min_lr: must be <= train.lr (0.001), got 0.01"},
      {{"train.warmup_steps=-1"}, "train.warmup_steps: must be >= 0, got -1"},
      {{"train.warmup_steps=1001"}, "train.warmup_steps: must be <= train.steps (1000), got 1001"},
      {{"train.weight_decay=-0.5"}, "train.weight_decay: must be >= 0, got -0.5"},
      {{"train.beta1=1"}, "train.beta1: must be in [0, 1), got 1.0"},
      {{"train.beta2=-0.1"}, "train.beta2: must be in [0, 1), got -0.1"},
      {{"train.grad_clip=-1"}, "train.grad_clip: must be >= 0, got -1.0"},
      {{"train.max_nonfinite_steps=0"}, "train.max_nonfinite_steps: must be > 0, got 0"},
      {{"train.ema_decay=1"}, "train.ema_decay: must be in [0, 1), got 1.0"},
      {{"train.precision=fp16"}, "train.precision: "},
      {{"train.attention_path=kernels"}, "train.attention_path: "},
      {{"train.cuda_graph=on"}, "train.cuda_graph: must be one of auto, off, got 'on'"},
      {{"train.device=gpu"}, "train.device: must be auto, cpu, cuda or cuda:N, got 'gpu'"},
      {{"train.device=cuda:x"}, "train.device: must be auto, cpu, cuda or cuda:N, got 'cuda:x'"},
      {{"train.dist_timeout_s=0"}, "train.dist_timeout_s: must be > 0, got 0"},
      {{"train.seed=-1"}, "train.seed: must be >= 0, got -1"},
      {{"train.threads=-1"}, "train.threads: must be >= 0, got -1"},
      {{"train.checkpoint_every=-1"}, "train.checkpoint_every: must be >= 0, got -1"},
      {{"train.keep_checkpoints=0"}, "train.keep_checkpoints: must be >= 1, got 0"},
      {{"train.eval_every=-1"}, "train.eval_every: must be >= 0, got -1"},
      {{"train.eval_batch_size=-1"}, "train.eval_batch_size: must be >= 0, got -1"},
      {{"train.log_every=0"}, "train.log_every: must be > 0, got 0"},
      {{"train.sample_every=-1"}, "train.sample_every: must be >= 0, got -1"},
      {{"train.sample_count=0"}, "train.sample_count: must be > 0, got 0"},
      {{"data.val_size=-1"}, "data.val_size: must be >= 0, got -1"},
      {{"data.dataset=mnist"},
       "data.dataset: must be one of fashion_mnist, cifar10, imagenet64, imagenet32, images, got 'mnist'"},
      {{"train.out_dir="}, "train.out_dir: must not be empty"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    Config config;
    for (const auto& o : c.overrides) apply_override(config, o);
    const std::string message = expect_invalid([&] { validate(config); }, {});
    EXPECT_EQ(message.rfind(c.message, 0), 0u) << "got: " << message;
  }
}

TEST(ConfigValidate, BoundaryValuesAreAccepted) {
  Config c = with({"model.layers=1",
                   "model.dropout=0",
                   "train.warmup_steps=1000",
                   "train.min_lr=0.001",
                   "train.grad_accum=16",
                   "train.beta1=0",
                   "train.grad_clip=0",
                   "train.keep_checkpoints=1"});
  EXPECT_NO_THROW(validate(c));
  Config deep = with({"model.layers=1024", "train.min_lr=0", "train.warmup_steps=0"});
  EXPECT_NO_THROW(validate(deep));
}

TEST(ConfigLoad, MissingFileOrFolderCannotBeRead) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.yaml").string();
  expect_invalid([&] { load_config(missing); }, {missing + ": cannot read config file"});
  expect_invalid([&] { load_config(dir.path().string()); },
                 {dir.path().string() + ": cannot read config file"});
}

TEST(ConfigLoad, ReadsValidatesAndResolves) {
  TempDir dir;
  const std::string path =
      dir.write("run.yaml", "data:\n  dataset: cifar10\ntrain:\n  steps: 50\n  warmup_steps: 5\n");
  const Config c = load_config(path);
  EXPECT_EQ(c.data.dataset, "cifar10");
  EXPECT_EQ(c.train.steps, 50);
  EXPECT_EQ(c.model.attention.row_len, 96);
  EXPECT_EQ(c.data.dir, data::default_dir("cifar10"));
}

TEST(ConfigLoad, ParseAndValidationErrorsArePrefixedWithThePath) {
  TempDir dir;
  const std::string empty = dir.write("empty.yaml", "");
  expect_invalid([&] { load_config(empty); }, {empty + ": config is empty"});
  const std::string typo = dir.write("typo.yaml", "train:\n  lrr: 0.1\n");
  expect_invalid([&] { load_config(typo); }, {typo + ": unknown key 'train.lrr'"});
  const std::string bad = dir.write("bad.yaml", "train:\n  steps: 10\n");  // warmup 100 > 10
  expect_invalid([&] { load_config(bad); },
                 {bad + ": train.warmup_steps: must be <= train.steps (10), got 100"});
  const std::string broken = dir.write("broken.yaml", "train:\n  lr: [1,\n");
  expect_invalid([&] { load_config(broken); }, {broken + ": invalid YAML at line"});
}

TEST(ConfigLoad, OverridesApplyBeforeOneValidate) {
  TempDir dir;
  const std::string path = dir.write("run.yaml", "train:\n  steps: 10\n");
  // Invalid alone (warmup 100 > 10 steps) but fixed by the override before validation.
  const Config c = load_config_with_overrides(path, {"train.warmup_steps=2", "model.layers=2"});
  EXPECT_EQ(c.train.warmup_steps, 2);
  EXPECT_EQ(c.model.layers, 2);
  expect_invalid(
      [&] {
        load_config_with_overrides(path, {"train.warmup_steps=2", "x=1"});
      },
      {"--set: unknown key 'x'"});
  expect_invalid([&] { load_config_with_overrides(path, {"train.warmup_steps=20"}); },
                 {path + " with --set overrides: train.warmup_steps: must be <= train.steps"});
}

}  // namespace
}  // namespace combiner::config
