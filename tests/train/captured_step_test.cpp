// The step a CUDA graph captures, run uncaptured on the CPU: every decision on the device (the
// learning rate and step counts as tensors, the skip of a non-finite step by the fused AdamW
// kernel and by the EMA's weight), the same numbers as the step launched op by op within the
// rounding of torch's fused AdamW against its foreach form, a skipped step that changes nothing,
// and runs that resume from one path onto the other. The capture itself needs a GPU
// (GpuCapturedWork in tests/util, and scripts/test-gpu.sh's train stage).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "model/transformer.h"
#include "test_utils.h"
#include "train/bits.h"
#include "train/captured_step.h"
#include "train/checkpoint.h"
#include "train/device_adamw.h"
#include "train/ema.h"
#include "train/optimizer.h"
#include "train/tiny_run.h"
#include "train/trainer.h"
#include "util/cuda_graph.h"
#include "util/torch_features.h"

namespace combiner::train {
namespace {

TEST(StaticStep, SaysWhyAStepIsNotCaptured) {
  auto t = tiny_run("unused", 3).train;
  const torch::Device cuda(torch::kCUDA, 0);
  EXPECT_EQ(StaticStep::why_not_captured(t, torch::kCPU, 1), "the step runs on cpu, not CUDA");
  t.cuda_graph = "off";
  EXPECT_EQ(StaticStep::why_not_captured(t, cuda, 1), "train.cuda_graph off");
  t.cuda_graph = "auto";
  EXPECT_EQ(StaticStep::why_not_captured(t, cuda, 2).rfind("2 processes: ", 0), 0u);
  t.activation_checkpointing = "true";
  EXPECT_EQ(
      StaticStep::why_not_captured(t, cuda, 1).rfind("train.activation_checkpointing sets", 0), 0u);
  t.activation_checkpointing = "false";
  t.recompute_mlp = true;  // keeps its dropout masks: capturable
  // What is left depends on the build: a CUDA LibTorch >= 2.4 captures.
  const auto rest = StaticStep::why_not_captured(t, cuda, 1);
  EXPECT_EQ(rest.empty(), DeviceAdamW::available() && util::CapturedWork::available()) << rest;
}

TEST(Ema, ADeviceSkipLeavesTheAverageExactlyAndOtherwiseFollowsTheRule) {
  struct Big : torch::nn::Module {
    Big() { weight = register_parameter("weight", torch::randn({1000})); }
    torch::Tensor weight;
  } m;
  auto ema = start_ema(m);
  {
    torch::NoGradGuard no_grad;
    ema[0].second.copy_(torch::randn({1000}));
  }
  const auto before = ema[0].second.clone();
  update_ema(ema, m, 0.999, torch::ones({}));
  EXPECT_TRUE(torch::equal(ema[0].second, before));
  update_ema(ema, m, 0.999, torch::zeros({}));
  const auto rule = before * 0.999 + m.weight.detach() * (1 - 0.999);
  EXPECT_FALSE(torch::equal(ema[0].second, before));
  EXPECT_LT((ema[0].second - rule).abs().max().item<double>(), 1e-6);
}

#if COMBINER_TORCH2_4_PATHS

using Tensors = std::vector<torch::Tensor>;

struct Model {
  model::ImageTransformer model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
  NamedTensors ema;
};

Model make_model(const config::Config& c) {
  torch::manual_seed(7);
  Model m;
  m.model = model::ImageTransformer(model::TransformerOptions::from_config(c));
  m.optimizer = make_optimizer(m.model, c.train);
  m.ema = start_ema(*m.model);
  m.model->train();
  return m;
}

const torch::optim::AdamWParamState& state_of(Model& m, const torch::Tensor& p) {
  return static_cast<const torch::optim::AdamWParamState&>(*m.optimizer->state().at(state_key(p)));
}

// The largest difference over the parameters, both moments and the EMA.
double max_difference(Model& a, Model& b) {
  double most = 0;
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    most = std::max(most, (pa[i] - pb[i]).abs().max().item<double>());
    most = std::max(
        most,
        (state_of(a, pa[i]).exp_avg() - state_of(b, pb[i]).exp_avg()).abs().max().item<double>());
    most = std::max(most,
                    (state_of(a, pa[i]).exp_avg_sq() - state_of(b, pb[i]).exp_avg_sq())
                        .abs()
                        .max()
                        .item<double>());
  }
  for (size_t i = 0; i < a.ema.size(); ++i)
    most = std::max(most, (a.ema[i].second - b.ema[i].second).abs().max().item<double>());
  return most;
}

// Copies of every tensor a step may change: parameters, moments, the EMA.
Tensors snapshot(Model& m) {
  Tensors out;
  for (const auto& p : m.model->parameters()) {
    out.push_back(p.detach().clone());
    out.push_back(state_of(m, p).exp_avg().clone());
    out.push_back(state_of(m, p).exp_avg_sq().clone());
  }
  for (const auto& [name, tensor] : m.ema) out.push_back(tensor.clone());
  return out;
}

TEST(DeviceAdamW, IsTheFusedUpdateWithItsRateAndCountsOnTheDevice) {
  auto c = tiny_run("unused", 4);
  c.train.weight_decay = 0.1;
  c.model.dropout = 0.0;
  auto ours = make_model(c), theirs = make_model(c);
  DeviceAdamW device_adamw(*ours.optimizer);
  const auto a = ours.model->parameters(), b = theirs.model->parameters();
  torch::manual_seed(3);
  const auto x = torch::randint(0, model::kVocab, {2, 784}, torch::kByte);
  for (int64_t step = 0; step < 4; ++step) {
    const double lr = 1e-3 * double(step + 1);  // a new rate every step reaches the kernel
    for (auto* m : {&ours, &theirs}) {
      m->optimizer->zero_grad();
      mean_bits(m->model->forward(x), x).backward();
    }
    const auto version = a.front()._version();
    device_adamw.prepare(lr);
    device_adamw.update(torch::zeros({}));
    device_adamw.count_update();
    // The update moves each parameter's version, as an in-place op does: what keeps something
    // made from a parameter (model::LinearImpl's bf16 copies) sees that it changed.
    EXPECT_GT(a.front()._version(), version) << "step " << step;
    set_learning_rate(*theirs.optimizer, lr);
    adamw_step(*theirs.optimizer);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(state_of(ours, a[i]).step(), state_of(theirs, b[i]).step()) << i;
    // The fused kernel rounds apart from the foreach update by float32 ulps, not more.
    EXPECT_LT(max_difference(ours, theirs), 1e-6) << "step " << step;
  }
  // A skipped update changes nothing and counts nothing.
  const auto before = snapshot(ours);
  device_adamw.prepare(1e-3);
  device_adamw.update(torch::ones({}));
  const auto after = snapshot(ours);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i])) << i;
  EXPECT_EQ(state_of(ours, a.front()).step(), 4);
}

TEST(StaticStep, TakesTheEagerStepsNumbersAndSkipsANonFiniteOneExactly) {
  auto c = tiny_run("unused", 4);  // dropout, 2 micro-batches, clipping, decay
  c.train.ema_decay = 0.9;
  auto ours = make_model(c), theirs = make_model(c);
  const auto& t = c.train;
  StaticStep step(ours.model, *ours.optimizer, ours.ema, t, 2, 784, /*capture=*/false);
  EXPECT_FALSE(step.captured());
  torch::manual_seed(5);
  const std::vector<torch::Tensor> batches = {
      torch::randint(0, model::kVocab, {2, 784}, torch::kByte),
      torch::randint(0, model::kVocab, {2, 784}, torch::kByte)};
  for (int64_t s = 0; s < 3; ++s) {
    const double lr = 1e-3 * double(s + 1);
    const auto n = step.run(batches, lr, /*poisoned=*/false, 100 + s);
    // The trainer's step launched op by op, with the same dropout seed.
    torch::manual_seed(100 + s);
    set_learning_rate(*theirs.optimizer, lr);
    theirs.optimizer->zero_grad();
    double bits = 0;
    for (const auto& x : batches) {
      auto loss = mean_bits(theirs.model->forward(x), x);
      (loss / 2.0).backward();
      bits += loss.item<double>() / 2.0;
    }
    const double norm = clip_gradients(theirs.model->parameters(), t.grad_clip).item<double>();
    adamw_step(*theirs.optimizer);
    update_ema(theirs.ema, *theirs.model, t.ema_decay);
    EXPECT_TRUE(n.updated);
    if (s == 0) {  // the same weights: the same forward and backward, bit for bit
      EXPECT_EQ(n.bits, bits);
      EXPECT_EQ(n.grad_norm, norm);
    }
    EXPECT_NEAR(n.bits, bits, 1e-5 * bits) << s;
    EXPECT_NEAR(n.grad_norm, norm, 1e-4 * norm) << s;
    EXPECT_LT(max_difference(ours, theirs), 1e-6) << "step " << s;
  }
  EXPECT_EQ(state_of(ours, ours.model->parameters().front()).step(), 3);

  const auto before = snapshot(ours);
  const auto skipped = step.run(batches, 1e-3, /*poisoned=*/true, 200);
  EXPECT_FALSE(skipped.updated);
  EXPECT_TRUE(std::isnan(skipped.bits));
  const auto after = snapshot(ours);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i])) << i;
  EXPECT_EQ(state_of(ours, ours.model->parameters().front()).step(), 3);
  // And the next good step updates again.
  EXPECT_TRUE(step.run(batches, 1e-3, false, 201).updated);
  EXPECT_EQ(state_of(ours, ours.model->parameters().front()).step(), 4);
}

// The checkpoint's model, moments and EMA, by name.
std::map<std::string, torch::Tensor> tensors_of(const Checkpoint& checkpoint) {
  std::map<std::string, torch::Tensor> out(checkpoint.model.begin(), checkpoint.model.end());
  for (const auto& [name, tensor] : checkpoint.ema) out["ema." + name] = tensor;
  return out;
}

double checkpoint_difference(const Checkpoint& a, const Checkpoint& b) {
  const auto x = tensors_of(a), y = tensors_of(b);
  EXPECT_EQ(x.size(), y.size());
  double most = 0;
  for (const auto& [name, tensor] : x) {
    EXPECT_EQ(y.count(name), 1u) << name;
    if (y.count(name) == 0 || !tensor.is_floating_point()) continue;
    most = std::max(most, (tensor - y.at(name)).abs().max().item<double>());
  }
  return most;
}

TEST(StaticStep, TrainerRunsSkipAndResumeAcrossTheTwoSteps) {
  combiner::testing::TempDir dir;
  auto config = [&](const std::string& name) {
    auto c = tiny_run(dir.file(name), 4);
    c.train.ema_decay = 0.9;
    return c;
  };
  RunOptions eager;
  eager.nan_loss_steps = {1};
  const auto reference = run_training(config("eager"), eager);
  EXPECT_EQ(reference.skipped_steps, 1);
  const auto expected = load_checkpoint(reference.final_checkpoint);

  RunOptions uncaptured = eager;
  uncaptured.uncaptured_static_step = true;
  const auto whole = run_training(config("static"), uncaptured);
  EXPECT_EQ(whole.skipped_steps, 1);
  const auto got = load_checkpoint(whole.final_checkpoint);
  EXPECT_EQ(got.step, 4);
  EXPECT_EQ(got.samples_seen, expected.samples_seen);
  EXPECT_LT(checkpoint_difference(got, expected), 1e-5);

  // Two steps with the static step, then resumed on the eager one.
  uncaptured.stop_after = 2;
  run_training(config("mixed"), uncaptured);
  RunOptions resumed = eager;
  resumed.resume = true;
  const auto mixed = load_checkpoint(run_training(config("mixed"), resumed).final_checkpoint);
  EXPECT_EQ(mixed.step, 4);
  EXPECT_LT(checkpoint_difference(mixed, expected), 1e-5);
}

#endif

}  // namespace
}  // namespace combiner::train
