// AdamW's per-parameter state read back from the bytes capture_optimizer (train/checkpoint.h)
// wrote, whichever LibTorch wrote them. torch::optim files each parameter's state under a key
// made from its TensorImpl's address: text ("0x55d0c8a1b2c0") up to LibTorch 2.1, a decimal
// number from 2.2 on, and each version's own load() reads only its own form (2.x turns
// "0x..." into 0 for every parameter: one gets another's moments, the rest none). Here a
// parameter's state is found by the key its group lists for it, compared as text, so both forms
// read in both builds. The settings (lr, betas, weight decay) stay those of the optimizer, which
// come from the run's config, as LibTorch 1.13's load() kept them.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace combiner::train {

// The LibTorch this build runs on, as checkpoints record their writer's: "LibTorch 1.13.0".
std::string torch_build_name();

// Replaces the state of `optimizer` with the saved one: parameter i of group g gets what the
// writer saved for its parameter i of group g (step count, exp_avg, exp_avg_sq), checked against
// the parameter's shape and dtype; parameters the writer held no state for get none. Throws
// std::runtime_error "<source>: optimizer state: <what is wrong>", one line, for bytes that are
// not such an archive, another number of groups or parameters, or a mis-shaped or missing moment;
// the optimizer is unchanged then.
void restore_adamw_state(torch::optim::AdamW& optimizer,
                         const std::vector<char>& bytes,
                         const std::string& source);

// Every moment of `optimizer` moved to `device` (checkpoints hold them on the CPU).
void move_adamw_state(torch::optim::AdamW& optimizer, const torch::Device& device);

// What capture_optimizer (train/checkpoint.h) writes, every moment from a CPU copy, wherever it
// lives; the optimizer keeps its own tensors (a captured step holds their addresses).
std::vector<char> adamw_state_bytes(torch::optim::AdamW& optimizer);

}  // namespace combiner::train
