#include "train/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>

#include "train/bits.h"
#include "util/device.h"

namespace combiner::train {

const char* describe(Recompute plan) {
  switch (plan) {
    case Recompute::kNone:
      return "nothing recomputed";
    case Recompute::kMlp:
      return "the MLP halves recomputed";
    case Recompute::kBlocks:
      return "whole blocks recomputed";
  }
  return "?";
}

Recompute named_plan(const config::TrainConfig& t) {
  if (t.activation_checkpointing == "auto")
    throw std::logic_error("named_plan: train.activation_checkpointing auto has no plan yet");
  if (t.activation_checkpointing == "true") return Recompute::kBlocks;
  return t.recompute_mlp ? Recompute::kMlp : Recompute::kNone;
}

config::TrainConfig with_plan(config::TrainConfig t, Recompute plan) {
  t.activation_checkpointing = plan == Recompute::kBlocks ? "true" : "false";
  t.recompute_mlp = plan == Recompute::kMlp;
  return t;
}

void apply_plan(model::ImageTransformerImpl& model, Recompute plan) {
  model.set_recompute(plan == Recompute::kBlocks, plan == Recompute::kMlp);
}

// Named, not anonymous: this folder builds as unity batches.
namespace memory_plan_detail {

Recompute plan_of(const model::TransformerOptions& o) {
  if (o.activation_checkpointing) return Recompute::kBlocks;
  return o.recompute_mlp ? Recompute::kMlp : Recompute::kNone;
}

void clear_gradients(model::ImageTransformerImpl& model) {
  for (auto& p : model.parameters()) p.mutable_grad().reset();
}

// Tensor MiB at the peak of one forward + backward of `images` zero images, above what was
// allocated before it.
double step_peak_mib(model::ImageTransformerImpl& model,
                     const torch::Device& device,
                     int64_t images) {
  clear_gradients(model);
  util::synchronize(device);
  const double before = util::device_allocated_mib(device);
  util::reset_peak_memory(device);
  {
    const auto x =
        torch::zeros({images, model.options().length()}, torch::dtype(torch::kByte).device(device));
    // The step's loss: what its path keeps for backward (log-probabilities or logits), no more.
    const auto loss = model.mean_bits(x);
    loss.backward();
  }
  util::synchronize(device);
  const double peak = util::device_peak_mib(device) - before;
  clear_gradients(model);
  return peak;
}

}  // namespace memory_plan_detail

StepMemory measure_step_memory(model::ImageTransformerImpl& model, Recompute plan) {
  using namespace memory_plan_detail;
  const auto device = model.parameters().front().device();
  if (device.is_cpu()) util::count_cpu_tensor_bytes();
  const Recompute before = plan_of(model.options());
  const bool training = model.is_training();
  auto generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  const auto rng = generator.get_state();
  apply_plan(model, plan);
  model.train();  // dropout keeps its masks, as in the step
  const torch::AutoGradMode grad(true);
  StepMemory m;
  try {
    // The first run makes the lazy allocations (workspaces, caches), which the run's steps hold
    // too. From 2 images on the peak grows by the same bytes per image; 1 image can hold a
    // little more than that line says (its peak reached at another point of the step), so the
    // line is raised to cover it.
    const double one = step_peak_mib(model, device, 1);
    const double two = step_peak_mib(model, device, 2);
    const double three = step_peak_mib(model, device, 3);
    m.per_image_mib = std::max(0.0, three - two);
    m.fixed_mib = std::max({0.0, two - 2 * m.per_image_mib, one - m.per_image_mib});
  } catch (...) {
    clear_gradients(model);
    apply_plan(model, before);
    model.train(training);
    generator.set_state(rng);
    throw;
  }
  apply_plan(model, before);
  model.train(training);
  generator.set_state(rng);
  return m;
}

bool step_fits(double needed_mib, double available_mib) {
  return needed_mib * kMemoryMargin + kMemoryReserveMib <= available_mib;
}

double parameter_mib(const torch::nn::Module& model) {
  double bytes = 0;
  for (const auto& p : model.parameters()) bytes += double(p.numel() * p.element_size());
  return bytes / (1024.0 * 1024.0);
}

double optimizer_state_mib(const torch::nn::Module& model, bool ema) {
  return parameter_mib(model) * (ema ? 4.0 : 3.0);
}

namespace memory_plan_detail {

// An allocation that failed: CUDA's caching allocator says "out of memory", the CPU's "not
// enough memory".
bool out_of_memory(const c10::Error& error) {
  const std::string what = error.what();
  return what.find("out of memory") != std::string::npos ||
         what.find("not enough memory") != std::string::npos;
}

std::string size(double mib) {
  return mib >= 1024 ? fmt::format("{:.1f} GiB", mib / 1024.0) : fmt::format("{:.0f} MiB", mib);
}

}  // namespace memory_plan_detail

MemoryPlan choose_plan(model::ImageTransformerImpl& model,
                       const config::TrainConfig& t,
                       int64_t images,
                       double state_mib,
                       double available_mib) {
  MemoryPlan choice;
  choice.images = images;
  if (t.activation_checkpointing != "auto") {
    choice.plan = named_plan(t);
    return choice;
  }
  choice.automatic = true;
  const auto device = model.parameters().front().device();
  choice.available_mib = available_mib >= 0 ? available_mib : util::device_available_mib(device);
  std::vector<Recompute> order = {Recompute::kMlp, Recompute::kBlocks};
  if (!t.recompute_mlp) order.insert(order.begin(), Recompute::kNone);
  const auto start = std::chrono::steady_clock::now();
  for (const Recompute plan : order) {
    PlanEstimate e;
    e.plan = plan;
    try {
      e.memory = measure_step_memory(model, plan);
      e.needed_mib = e.memory.at(images) + state_mib;
    } catch (const c10::Error& error) {  // a plan too big to measure does not fit either
      if (!memory_plan_detail::out_of_memory(error)) throw;
      util::release_cached_memory(device);
      e.out_of_memory = true;
      e.needed_mib = std::numeric_limits<double>::infinity();
    }
    choice.estimates.push_back(e);
    choice.plan = plan;
    choice.fits = step_fits(e.needed_mib, choice.available_mib);
    if (choice.fits) break;
  }
  util::release_cached_memory(device);  // the step starts as if nothing had been measured
  choice.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return choice;
}

std::string MemoryPlan::describe(const std::string& device) const {
  using memory_plan_detail::size;
  const std::string name = train::describe(plan);
  if (!automatic)
    return name + " (train.activation_checkpointing " +
           (plan == Recompute::kBlocks ? "true" : "false") +
           (plan == Recompute::kMlp ? ", train.recompute_mlp true)" : ")");
  const PlanEstimate* chosen = nullptr;
  for (const auto& e : estimates)
    if (e.plan == plan) chosen = &e;
  std::string line = "train.activation_checkpointing auto: " + name;
  if (chosen == nullptr)
    line += " (another rank's device needed it)";
  else if (chosen->out_of_memory)
    line += ": measuring it ran out of memory at up to 3 images";
  else
    line += fmt::format(
        ": a step of {} images needs {} ({} + {} per image, with AdamW's and the "
        "EMA's state)",
        images,
        size(chosen->needed_mib),
        size(chosen->needed_mib - chosen->memory.per_image_mib * double(images)),
        size(chosen->memory.per_image_mib));
  line += fmt::format(", {} free on {} (measured at 1 to 3 images in {:.1f} s)",
                      size(available_mib),
                      device,
                      seconds);
  if (!fits) line += ": it may not fit; lower train.batch_size or raise train.grad_accum";
  for (const auto& e : estimates) {
    if (&e == chosen) continue;
    line += "; " + std::string(train::describe(e.plan)) +
            (e.out_of_memory ? " ran out of memory at up to 3 images"
                             : " would need " + size(e.needed_mib));
  }
  return line;
}

}  // namespace combiner::train
