// Non-finite numbers: an update whose loss (hence gradient) is NaN is skipped and counted, and
// leaves the parameters and optimizer state exactly as they were, and the next good update is
// taken; train.max_nonfinite_steps of them in a row stop the run with a message, and the
// checkpoints written so far stay as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "model/transformer.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

namespace combiner::train {
namespace {

using combiner::testing::TempDir;

using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

void expect_same_tensors(const Tensors& a, const Tensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(torch::equal(a[i].second, b[i].second)) << a[i].first;
  }
}

// AdamW's moments and step counts of two checkpoints (the serialised bytes also hold the
// learning rate, which the schedule changes every step).
void expect_same_adam_state(const Checkpoint& a, const Checkpoint& b, const config::Config& c) {
  auto state_of = [&](const Checkpoint& checkpoint) {
    model::ImageTransformer model(model::TransformerOptions::from_config(c));
    auto optimizer = make_optimizer(model, c.train);
    restore_optimizer(*optimizer, checkpoint, "checkpoint");
    std::vector<torch::Tensor> tensors;
    for (const auto& p : model->parameters()) {
      auto& s = static_cast<torch::optim::AdamWParamState&>(
          *optimizer->state().at(state_key(p)));
      tensors.push_back(s.exp_avg());
      tensors.push_back(s.exp_avg_sq());
      tensors.push_back(torch::tensor(s.step()));
    }
    return tensors;
  };
  const auto x = state_of(a), y = state_of(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(torch::equal(x[i], y[i])) << i;
}

// AdamW's update count of each parameter in a checkpoint, 0 where it holds no state yet.
std::vector<int64_t> adam_steps(const Checkpoint& checkpoint, const config::Config& c) {
  model::ImageTransformer model(model::TransformerOptions::from_config(c));
  auto optimizer = make_optimizer(model, c.train);
  restore_optimizer(*optimizer, checkpoint, "checkpoint");
  std::vector<int64_t> steps;
  for (const auto& p : model->parameters()) {
    const auto found = optimizer->state().find(state_key(p));
    steps.push_back(found == optimizer->state().end()
                        ? 0
                        : static_cast<torch::optim::AdamWParamState&>(*found->second).step());
  }
  return steps;
}

TEST(NonFinite, ASkippedUpdateChangesNothing) {
  TempDir dir;
  // Two good updates of a 3-step schedule, then stop: the state before step 3.
  RunOptions two;
  two.stop_after = 2;
  const auto before =
      load_checkpoint(run_training(tiny_run(dir.file("a"), 3), two).final_checkpoint);

  // The same run whose third loss is NaN: the update is skipped, the run ends normally.
  RunOptions poisoned;
  poisoned.nan_loss_steps = {2};
  const auto run = run_training(tiny_run(dir.file("b"), 3), poisoned);
  EXPECT_EQ(run.skipped_steps, 1);
  const auto after = load_checkpoint(run.final_checkpoint);
  EXPECT_EQ(after.step, 3);
  expect_same_tensors(before.model, after.model);
  expect_same_adam_state(before, after, tiny_run(dir.file("b"), 3));

}

TEST(NonFinite, TheGoodStepAfterASkippedOneUpdatesTheWeights) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 3);
  c.train.checkpoint_every = 1;
  RunOptions early;
  early.nan_loss_steps = {0};
  const auto run = run_training(c, early);
  EXPECT_EQ(run.skipped_steps, 1);
  // Step 1 was skipped: its checkpoint holds the initial weights (the trainer seeds with
  // train.seed, then builds the model) and no AdamW state.
  torch::manual_seed(static_cast<uint64_t>(c.train.seed));
  model::ImageTransformer initial(model::TransformerOptions::from_config(c));
  auto initial_tensors = capture_model(*initial);  // in the checkpoint's order, by name
  std::sort(initial_tensors.begin(), initial_tensors.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  const auto one = load_checkpoint(checkpoint_path(c.train.out_dir, 1));
  expect_same_tensors(initial_tensors, one.model);
  const size_t parameters = initial->parameters().size();
  EXPECT_EQ(adam_steps(one, c), std::vector<int64_t>(parameters, 0));
  // Step 2 was taken: every parameter moved, and AdamW counts one update for each.
  const auto two = load_checkpoint(checkpoint_path(c.train.out_dir, 2));
  ASSERT_EQ(two.model.size(), one.model.size());
  size_t moved = 0;
  for (const auto& p : initial->named_parameters()) {
    for (size_t i = 0; i < two.model.size(); ++i) {
      if (two.model[i].first != p.key()) continue;
      EXPECT_FALSE(torch::equal(two.model[i].second, one.model[i].second)) << p.key();
      ++moved;
    }
  }
  EXPECT_EQ(moved, parameters);
  EXPECT_EQ(adam_steps(two, c), std::vector<int64_t>(parameters, 1));
}

TEST(NonFinite, TooManyInARowStopTheRunAndKeepTheLastCheckpoint) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 6);
  c.train.checkpoint_every = 1;
  c.train.max_nonfinite_steps = 2;
  RunOptions options;
  options.nan_loss_steps = {1, 2, 3};  // steps 2, 3 and 4 in the log's 1-based numbering
  std::string message;
  try {
    run_training(c, options);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("2 updates in a row had a non-finite loss or gradient (steps 2 to 3"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("train.max_nonfinite_steps = 2"), std::string::npos) << message;
  // The run stopped inside step 3, before its checkpoint. Step 2's was written after a skipped
  // update, so it holds step 1's weights, finite and whole.
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(c.train.out_dir, 3)));
  const auto one = load_checkpoint(checkpoint_path(c.train.out_dir, 1));
  const auto two = load_checkpoint(checkpoint_path(c.train.out_dir, 2));
  EXPECT_EQ(two.step, 2);
  expect_same_tensors(one.model, two.model);
}

}  // namespace
}  // namespace combiner::train
