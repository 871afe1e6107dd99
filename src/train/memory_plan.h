// What a training step recomputes in backward (train.activation_checkpointing,
// train.recompute_mlp), and for `activation_checkpointing: auto` the choice made from what this
// model's step measures on its own device: the fastest plan whose step fits the memory there.
//
// A step's tensor memory is linear in its images: a part that does not grow with the batch (the
// gradients, the autocast copies of the weights, workspaces) and a part per image (activations
// kept for backward, backward's working set). measure_step_memory runs forward + backward of 1,
// 2 and 3 images and reads the allocator's peak of each: the difference of the last two is the
// part per image, and the line through them is raised to cover the first (which also makes the
// lazy allocations). The step of n images then needs fixed + n x per_image, plus what AdamW and
// the EMA will hold once they start.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"

namespace combiner::train {

// Fastest first: nothing recomputed, the MLP halves recomputed, whole blocks recomputed.
enum class Recompute { kNone = 0, kMlp = 1, kBlocks = 2 };

// "nothing recomputed", "the MLP halves recomputed", "whole blocks recomputed".
const char* describe(Recompute plan);

// The plan a config names; train.activation_checkpointing must not be auto.
Recompute named_plan(const config::TrainConfig& t);

// `t` with the plan written into its two keys (activation_checkpointing true or false).
config::TrainConfig with_plan(config::TrainConfig t, Recompute plan);

// The plan applied to `model`'s blocks.
void apply_plan(model::ImageTransformerImpl& model, Recompute plan);

struct StepMemory {
  double fixed_mib = 0;      // what a step holds at its peak whatever its batch
  double per_image_mib = 0;  // and what it holds more per image of the micro-batch
  double at(int64_t images) const { return fixed_mib + per_image_mib * double(images); }
};

// One step's tensor peak under `plan`, measured on the model's device by forward + backward of
// zero images of the model's length (above). The model's gradients are cleared afterwards, its
// plan, training mode and the CPU generator's state are as before, and on the CPU tensor bytes
// are counted from then on (util::count_cpu_tensor_bytes).
StepMemory measure_step_memory(model::ImageTransformerImpl& model, Recompute plan);

// What a plan was judged on: its measured memory and the step it predicts.
struct PlanEstimate {
  Recompute plan = Recompute::kNone;
  StepMemory memory;
  double needed_mib = 0;  // memory.at(images) + the state still to come; infinite if it ran out
  bool out_of_memory = false;  // measuring it failed an allocation
};

struct MemoryPlan {
  Recompute plan = Recompute::kNone;
  bool automatic = false;               // chosen by auto (else named by the config)
  bool fits = true;                     // auto: the chosen plan's step fits
  int64_t images = 0;                   // per micro-batch
  double available_mib = 0;             // auto: what the device could give before the step
  double seconds = 0;                   // auto: the measurements' time
  std::vector<PlanEstimate> estimates;  // auto: each plan measured, in the order tried
  // One line for the log: the plan, and for auto why (the step it predicts against what the
  // device has; the faster plans that did not fit).
  std::string describe(const std::string& device) const;
};

// A plan's step fits when needed x kMemoryMargin + kMemoryReserveMib <= what is available:
// room for the allocator's rounding and fragmentation, the CUDA context and library
// workspaces, and the validation and sampling passes that run beside a captured step's memory.
constexpr double kMemoryMargin = 1.15;
constexpr double kMemoryReserveMib = 1024;
bool step_fits(double needed_mib, double available_mib);

// The plan for a run: the one the config names, or for auto the first of none, MLP, blocks
// (MLP, blocks where train.recompute_mlp is set) whose step of `images` fits the device's
// memory, each measured on `model` (measure_step_memory) until one fits; a plan whose
// measurement runs out of memory does not fit; whole blocks if none does (fits false: the
// caller warns). `state_mib`: the bytes still to be allocated that every
// plan holds (AdamW's moments, the EMA). `available_mib` < 0: read it from the device
// (util::device_available_mib) before measuring.
MemoryPlan choose_plan(model::ImageTransformerImpl& model,
                       const config::TrainConfig& t,
                       int64_t images,
                       double state_mib,
                       double available_mib = -1);

// The model's parameters, MiB.
double parameter_mib(const torch::nn::Module& model);

// What the update adds to a step, MiB: AdamW's two moments, one more copy of the parameters for
// the update's temporaries (the foreach form's, on the CPU), and the EMA's copy when ema_decay > 0.
double optimizer_state_mib(const torch::nn::Module& model, bool ema);

}  // namespace combiner::train
