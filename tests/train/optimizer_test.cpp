// The lean update against LibTorch's own: adamw_step and clip_gradients on the CPU give bitwise
// the parameters, moments, step counts, clipped gradients, norms and checkpoint bytes of
// torch::optim::AdamW::step() and torch::nn::utils::clip_grad_norm_, over several steps of a
// real model's gradients; and the trainer ends where the loop it had before (those two, and the
// loss read after every micro-batch) ends.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "data/dataset.h"
#include "model/transformer.h"
#include "test_utils.h"
#include "train/batches.h"
#include "train/bits.h"
#include "train/checkpoint.h"
#include "train/device_adamw.h"
#include "train/optimizer.h"
#include "train/optimizer_state.h"
#include "train/schedule.h"
#include "train/step_checks.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

namespace combiner::train {
namespace {

const torch::optim::AdamWParamState& state_of(ModelRun& r, const torch::Tensor& p) {
  return static_cast<const torch::optim::AdamWParamState&>(*r.optimizer->state().at(state_key(p)));
}

void expect_same_runs(ModelRun& ours, ModelRun& theirs, int64_t step) {
  const auto a = ours.model->parameters(), b = theirs.model->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i << " after step " << step;
    const bool has_state = ours.optimizer->state().count(state_key(a[i]));
    ASSERT_EQ(has_state, theirs.optimizer->state().count(state_key(b[i])));
    if (!has_state) continue;
    const auto &s = state_of(ours, a[i]), &t = state_of(theirs, b[i]);
    EXPECT_EQ(s.step(), t.step()) << i;
    EXPECT_TRUE(torch::equal(s.exp_avg(), t.exp_avg())) << i;
    EXPECT_TRUE(torch::equal(s.exp_avg_sq(), t.exp_avg_sq())) << i;
  }
}

TEST(Optimizer, UpdateIsBitwiseTorchAdamWAndClipGradNorm) {
  auto c = tiny_run("unused", 5);
  c.train.weight_decay = 0.1;
  c.model.dropout = 0.0;
  auto ours = make_model_run(c), theirs = make_model_run(c);
  EXPECT_EQ(adamw_kernel(torch::kCPU), "foreach");
  torch::manual_seed(3);
  const auto x = torch::randint(0, model::kVocab, {2, 784}, torch::kByte);
  const auto a = ours.model->parameters(), b = theirs.model->parameters();
  for (int64_t step = 0; step < 5; ++step) {
    ours.optimizer->zero_grad();
    theirs.optimizer->zero_grad();
    mean_bits(ours.model->forward(x), x).backward();
    // The same gradients for both, so the updates alone are compared; step 1 leaves the head's
    // bias without one (both skip it, and its step count falls behind the others').
    for (size_t i = 0; i < a.size(); ++i) b[i].mutable_grad() = a[i].grad().clone();
    if (step == 1) {
      a.back().mutable_grad().reset();
      b.back().mutable_grad().reset();
    }
    // Clipping bites on step 0 (max 0.1), not after (no limit).
    const double max_norm = step == 0 ? 0.1 : std::numeric_limits<double>::infinity();
    const auto norm = clip_gradients(a, max_norm);
    const double expected = torch::nn::utils::clip_grad_norm_(b, max_norm);
    EXPECT_EQ(norm.item<double>(), expected) << step;
    if (step == 0) {
      EXPECT_GT(expected, 0.1);
    }
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].grad().defined()) {
        EXPECT_TRUE(torch::equal(a[i].grad(), b[i].grad())) << i;
      }
    }
    adamw_step(*ours.optimizer);
    theirs.optimizer->step();
    expect_same_runs(ours, theirs, step);
  }
  EXPECT_EQ(state_of(ours, a.back()).step(), 4);
  EXPECT_EQ(state_of(ours, a.front()).step(), 5);
  // The state adamw_step made goes through a checkpoint as torch's does: restored into a third
  // optimizer (with torch's own step() from there on), it equals theirs.
  auto restored = make_model_run(c);
  restore_adamw_state(*restored.optimizer, capture_optimizer(*ours.optimizer), "ours");
  const auto r = restored.model->parameters();
  for (size_t i = 0; i < r.size(); ++i) {
    const auto &s = state_of(restored, r[i]), &t = state_of(theirs, b[i]);
    EXPECT_EQ(s.step(), t.step()) << i;
    EXPECT_TRUE(torch::equal(s.exp_avg(), t.exp_avg())) << i;
    EXPECT_TRUE(torch::equal(s.exp_avg_sq(), t.exp_avg_sq())) << i;
  }
}

TEST(Optimizer, TrainerEndsWhereTorchsOwnLoopEnds) {
  combiner::testing::TempDir dir;
  const auto c = tiny_run(dir.file("run"), 3);  // dropout, 2 micro-batches, clipping, decay
  const auto trained = load_checkpoint(run_training(c, RunOptions{}).final_checkpoint);

  // The loop as it was: torch::optim::AdamW::step(), clip_grad_norm_, loss.item() per micro-batch.
  const auto& t = c.train;
  const auto train_set = data::load_split(c.data, data::Split::kTrain);
  torch::manual_seed(static_cast<uint64_t>(t.seed));
  model::ImageTransformer model(model::TransformerOptions::from_config(c));
  auto optimizer = make_optimizer(model, t);
  BatchStream stream(train_set, t.seed);
  model->train();
  const int64_t micro = t.batch_size / t.grad_accum;
  for (int64_t step = 0, seen = 0; step < t.steps; ++step, seen += t.batch_size) {
    set_learning_rate(*optimizer, learning_rate(t, step));
    optimizer->zero_grad();
    for (int64_t m = 0; m < t.grad_accum; ++m) {
      auto x = stream.take(seen + m * micro, micro);
      auto loss = mean_bits(model->forward(x), x);
      (loss / double(t.grad_accum)).backward();
      loss.item<double>();
    }
    torch::nn::utils::clip_grad_norm_(model->parameters(), t.grad_clip);
    optimizer->step();
  }
  const std::map<std::string, torch::Tensor> saved(trained.model.begin(), trained.model.end());
  const auto expected = capture_model(*model);
  ASSERT_EQ(expected.size(), saved.size());
  for (const auto& [name, tensor] : expected) {
    ASSERT_EQ(saved.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(tensor, saved.at(name))) << name;
  }
}

TEST(Optimizer, ClipOfNonFiniteGradientsGivesTheSameNorm) {
  std::vector<torch::Tensor> a = {torch::ones({3}).requires_grad_(), torch::ones({2, 2})};
  a[1].requires_grad_();
  a[0].mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f});
  a[1].mutable_grad() = torch::full({2, 2}, 3.0f);
  EXPECT_TRUE(std::isnan(clip_gradients(a, 1.0).item<double>()));
  a[0].mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 2.0f});
  a[1].mutable_grad() = torch::full({2, 2}, 3.0f);  // the NaN coefficient reached it above
  EXPECT_TRUE(std::isinf(clip_gradients(a, 1.0).item<double>()));
  // No gradient at all: 0, as clip_grad_norm_ returns.
  std::vector<torch::Tensor> none = {torch::ones({3}).requires_grad_()};
  EXPECT_EQ(clip_gradients(none, 1.0).item<double>(), 0.0);
}

TEST(Optimizer, DeviceCheckIsExactOnTheCpu) {
  const auto update = check_update(torch::kCPU, 4);
  EXPECT_EQ(update.adamw, 0.0);
  EXPECT_EQ(update.clip, 0.0);
  // The captured step's update, where this LibTorch has it: the fused kernel rounds apart from
  // the foreach update by float32 ulps, and a skipped update changes nothing at all.
  if (DeviceAdamW::available()) {
    EXPECT_GE(update.device_adamw, 0.0);  // it ran
    EXPECT_LT(update.device_adamw, 1e-6);
    EXPECT_EQ(update.device_skip, 0.0);
  } else {
    EXPECT_LT(update.device_adamw, 0.0);
  }
  EXPECT_TRUE(update.ok());
  const auto full = check_attention({"full", 0, 0, "max"}, 64, 2, 8, torch::kCPU, torch::kFloat);
  EXPECT_EQ(full.prefix, 64);
  EXPECT_LT(full.forward, 1e-6);
  EXPECT_LT(full.decode, 1e-6);
  EXPECT_TRUE(full.ok());
}

}  // namespace
}  // namespace combiner::train
