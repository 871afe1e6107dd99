// train.activation_checkpointing auto: a step's memory measured at 1 to 3 images predicts the
// peak of a step of more (counted tensor bytes on the CPU, as the CUDA allocator counts them);
// the measurement leaves the model and the dropout generator as they were; auto takes the
// fastest plan that fits; and a run with auto trains exactly as the run with the plan it chose.
#include <gtest/gtest.h>

#include <string>

#include "model/transformer.h"
#include "test_utils.h"
#include "train/bits.h"
#include "train/checkpoint.h"
#include "train/memory_plan.h"
#include "train/tiny_run.h"
#include "train/trainer.h"
#include "util/device.h"

namespace combiner::train {
namespace {

// Four blocks of 32 on Fashion-MNIST's 784 subpixels, dropout on, float32, LibTorch's path.
model::ImageTransformer small_model(const std::string& attention = "combiner-axial-rowmajor") {
  auto c = tiny_run("unused", 1);
  c.model.layers = 4;
  c.model.width = 32;
  c.model.attention.type = attention;
  config::validate(c);
  torch::manual_seed(0);
  return model::ImageTransformer(model::TransformerOptions::from_config(c));
}

// The tensor peak of one forward + backward of `images` images under `plan`, above before it.
double measured_peak(model::ImageTransformerImpl& model, Recompute plan, int64_t images) {
  apply_plan(model, plan);
  const torch::Device cpu(torch::kCPU);
  const double before = util::device_allocated_mib(cpu);
  util::reset_peak_memory(cpu);
  {
    const auto x = torch::randint(0, 256, {images, model.options().length()}, torch::kByte);
    const auto loss = mean_bits(model.forward(x), x);  // as the trainer's step
    loss.backward();
  }
  const double peak = util::device_peak_mib(cpu) - before;
  for (auto& p : model.parameters()) p.mutable_grad().reset();
  apply_plan(model, Recompute::kNone);
  return peak;
}

TEST(MemoryPlan, ConfigNamesAPlanInItsTwoKeys) {
  config::TrainConfig t;
  EXPECT_EQ(named_plan(t), Recompute::kNone);
  t.recompute_mlp = true;
  EXPECT_EQ(named_plan(t), Recompute::kMlp);
  t.activation_checkpointing = "true";
  EXPECT_EQ(named_plan(t), Recompute::kBlocks);
  t.activation_checkpointing = "auto";
  EXPECT_THROW(named_plan(t), std::logic_error);
  for (const auto plan : {Recompute::kNone, Recompute::kMlp, Recompute::kBlocks})
    EXPECT_EQ(named_plan(with_plan(t, plan)), plan) << describe(plan);
}

TEST(MemoryPlan, AStepFitsWithItsMarginAndReserve) {
  const double needed = 1000;
  const double exact = needed * kMemoryMargin + kMemoryReserveMib;
  EXPECT_TRUE(step_fits(needed, exact));
  EXPECT_FALSE(step_fits(needed, exact - 1));
  EXPECT_FALSE(step_fits(needed, needed));  // the bare estimate leaves no room
}

// The measured line predicts the peak of 1, 6 and 16 images, never below it and within 3% (on
// the CPU the peak grows by the same bytes per image from 2 on, and 1 image holds a little more
// than that line says), for each plan; the plans
// order as their definitions say; the model, its gradients and the generator are untouched.
TEST(MemoryPlan, TwoSmallStepsPredictALargerStepsPeak) {
  auto model = small_model();
  model->train();
  auto generator = at::detail::getDefaultCPUGenerator();
  const auto rng = generator.get_state();
  StepMemory none, mlp, blocks;
  none = measure_step_memory(*model, Recompute::kNone);
  mlp = measure_step_memory(*model, Recompute::kMlp);
  blocks = measure_step_memory(*model, Recompute::kBlocks);
  EXPECT_TRUE(torch::equal(generator.get_state(), rng));
  EXPECT_FALSE(model->options().activation_checkpointing);
  EXPECT_FALSE(model->options().recompute_mlp);
  EXPECT_TRUE(model->is_training());
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());

  EXPECT_GT(blocks.per_image_mib, 0);
  EXPECT_LT(blocks.per_image_mib, 0.5 * mlp.per_image_mib) << blocks.per_image_mib;
  EXPECT_LT(mlp.per_image_mib, 0.9 * none.per_image_mib) << mlp.per_image_mib;
  EXPECT_GT(none.fixed_mib, 0);  // the gradients, at least

  const struct {
    Recompute plan;
    StepMemory memory;
  } cases[] = {{Recompute::kNone, none}, {Recompute::kMlp, mlp}, {Recompute::kBlocks, blocks}};
  for (const auto& c : cases) {
    for (const int64_t images : {6, 16}) {
      const double peak = measured_peak(*model, c.plan, images);
      EXPECT_GE(c.memory.at(images), peak) << describe(c.plan) << ", " << images;
      EXPECT_LE(c.memory.at(images), 1.03 * peak)
          << describe(c.plan) << ", " << images << " images: " << c.memory.fixed_mib << " + "
          << c.memory.per_image_mib << " per image";
    }
    const double one = measured_peak(*model, c.plan, 1);
    EXPECT_GE(c.memory.at(1), one) << describe(c.plan);
    EXPECT_LE(c.memory.at(1), 1.03 * one) << describe(c.plan);
  }
}

TEST(MemoryPlan, AutoTakesTheFastestPlanThatFits) {
  auto model = small_model();
  config::TrainConfig t;
  t.activation_checkpointing = "auto";
  const int64_t images = 8;
  const double state = 1;
  const auto none = measure_step_memory(*model, Recompute::kNone).at(images) + state;
  const auto mlp = measure_step_memory(*model, Recompute::kMlp).at(images) + state;
  const auto room = [](double needed) { return needed * kMemoryMargin + kMemoryReserveMib; };

  auto plan = choose_plan(*model, t, images, state, room(none));
  EXPECT_EQ(plan.plan, Recompute::kNone);
  EXPECT_TRUE(plan.automatic && plan.fits);
  ASSERT_EQ(plan.estimates.size(), 1u);
  EXPECT_NEAR(plan.estimates[0].needed_mib, none, 1e-3 * none);  // the first probe made caches

  plan = choose_plan(*model, t, images, state, room(none) - 1);
  EXPECT_EQ(plan.plan, Recompute::kMlp);
  EXPECT_TRUE(plan.fits);
  EXPECT_EQ(plan.estimates.size(), 2u);
  const auto line = plan.describe("cpu");
  EXPECT_NE(line.find("auto: the MLP halves recomputed: a step of 8 images needs"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("; nothing recomputed would need"), std::string::npos) << line;
  EXPECT_NE(line.find("GiB free on cpu (measured at 1 to 3 images in "), std::string::npos) << line;

  plan = choose_plan(*model, t, images, state, room(mlp) - 1);
  EXPECT_EQ(plan.plan, Recompute::kBlocks);
  EXPECT_EQ(plan.estimates.size(), 3u);
  plan = choose_plan(*model, t, images, state, 0);  // nothing fits: the most frugal, with a warning
  EXPECT_EQ(plan.plan, Recompute::kBlocks);
  EXPECT_FALSE(plan.fits);
  EXPECT_NE(plan.describe("cpu").find("it may not fit; lower train.batch_size"), std::string::npos);

  t.recompute_mlp = true;  // at least the MLP halves
  plan = choose_plan(*model, t, images, state, 1e12);
  EXPECT_EQ(plan.plan, Recompute::kMlp);
  EXPECT_EQ(plan.estimates.size(), 1u);

  t.activation_checkpointing = "false";  // named: nothing measured
  plan = choose_plan(*model, t, images, state, 0);
  EXPECT_EQ(plan.plan, Recompute::kMlp);
  EXPECT_FALSE(plan.automatic);
  EXPECT_TRUE(plan.estimates.empty());
}

// A plan whose measurement fails an allocation does not fit: with the CPU's tensors limited to
// less than 3 images need with nothing or the MLP halves recomputed, and more than with whole
// blocks, auto takes whole blocks and says why, and the model is as it was.
TEST(MemoryPlan, APlanThatRunsOutOfMemoryWhileMeasuredDoesNotFit) {
  auto model = small_model();
  const double mlp = measure_step_memory(*model, Recompute::kMlp).at(3);
  const double blocks = measure_step_memory(*model, Recompute::kBlocks).at(3);
  ASSERT_LT(blocks, 0.75 * mlp);
  const torch::Device cpu(torch::kCPU);
  util::limit_cpu_tensor_bytes(util::device_allocated_mib(cpu) + (blocks + mlp) / 2);
  config::TrainConfig t;
  t.activation_checkpointing = "auto";
  MemoryPlan plan;
  EXPECT_NO_THROW(plan = choose_plan(*model, t, 2, 0, 1e12));
  util::limit_cpu_tensor_bytes(-1);
  EXPECT_EQ(plan.plan, Recompute::kBlocks);
  ASSERT_EQ(plan.estimates.size(), 3u);
  EXPECT_TRUE(plan.estimates[0].out_of_memory && plan.estimates[1].out_of_memory);
  EXPECT_FALSE(plan.estimates[2].out_of_memory);
  const auto line = plan.describe("cpu");
  EXPECT_NE(line.find("auto: whole blocks recomputed: a step of 2 images needs"), std::string::npos)
      << line;
  EXPECT_NE(line.find("; nothing recomputed ran out of memory at up to 3 images; the MLP halves "
                      "recomputed ran out of memory"),
            std::string::npos)
      << line;
  EXPECT_FALSE(model->options().activation_checkpointing || model->options().recompute_mlp);
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(MemoryPlan, DeviceMemoryIsReadFromTheSystem) {
  const double available = util::device_available_mib(torch::kCPU);
  EXPECT_GT(available, 64);  // this machine has more than 64 MiB free
  EXPECT_LT(available, 64.0 * 1024 * 1024);
}

// The probe draws nothing from the run's generator and leaves no gradient behind: the run with
// auto (nothing recomputed here, where memory is plentiful) ends with the very weights of the run
// with activation_checkpointing false, dropout on.
TEST(MemoryPlan, AutoRunTrainsAsTheRunOfItsPlan) {
  testing::TempDir dir;
  auto named = tiny_run(dir.file("named"), 3);
  auto automatic = tiny_run(dir.file("auto"), 3);
  automatic.train.activation_checkpointing = "auto";
  const auto a = load_checkpoint(run_training(named, {}).final_checkpoint);
  const auto b = load_checkpoint(run_training(automatic, {}).final_checkpoint);
  ASSERT_EQ(a.model.size(), b.model.size());
  for (size_t i = 0; i < a.model.size(); ++i)
    EXPECT_TRUE(torch::equal(a.model[i].second, b.model[i].second)) << a.model[i].first;
  EXPECT_TRUE(torch::equal(a.rng_state, b.rng_state));
  // The run folder keeps auto: a resume elsewhere decides again.
  EXPECT_NE(b.config_yaml.find("activation_checkpointing: \"auto\""), std::string::npos);
}

}  // namespace
}  // namespace combiner::train
