// Checks `combiner-bench train` runs on its device before it times anything, as llm.c's kernel
// programs do: the update (adamw_step, clip_gradients) against torch::optim::AdamW::step() and
// clip_grad_norm_, and the model's attention variant against the float64 dense reference. The
// test suite covers these on the CPU; on CUDA the fused and flash paths run only here.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "attention/options.h"

namespace combiner::train {

struct UpdateCheck {
  double adamw = 0;  // max abs difference of parameters and both moments after the steps
  double clip = 0;   // max abs difference of the clipped gradients, relative one of the norms
  // The captured step's update (DeviceAdamW), where this LibTorch has it (else negative): max
  // abs difference as `adamw`, and the largest change a skipped update made (must be 0).
  double device_adamw = -1;
  double device_skip = -1;
  bool ok() const {
    return adamw <= 1e-4 && clip <= 1e-4 && device_adamw <= 1e-4 && device_skip <= 0;
  }
};

// `steps` updates from one random start (matrices, vectors, decay and no-decay groups, gradients
// with norms above and below the clip) by adamw_step + clip_gradients and by
// torch::optim::AdamW::step() + clip_grad_norm_, on `device`; and by DeviceAdamW with its rate and
// step counts on the device, then one update it skips.
UpdateCheck check_update(const torch::Device& device, int64_t steps = 3);

struct AttentionCheck {
  int64_t prefix = 0;    // positions compared
  double forward = 0;    // ||forward - reference|| / ||reference||
  double decode = 0;     // ||decode steps - forward|| / ||forward||
  double tolerance = 0;  // allowed for either, by dtype
  bool ok() const { return forward <= tolerance && decode <= tolerance; }
};

// A fresh module of `options` (built for `length`, head dim D) on `device` with random
// [1, heads, prefix, D] inputs of `dtype`, prefix = min(length, 2 x the layout's block or row);
// the reference sees the same (rounded) inputs in float64. Tolerance 1e-4 for float32 and
// float64 inputs, 3e-2 for bfloat16.
AttentionCheck check_attention(const attention::AttentionOptions& options,
                               int64_t length,
                               int64_t heads,
                               int64_t head_dim,
                               const torch::Device& device,
                               torch::ScalarType dtype);

// "update: max abs diff ... ; attention: ..." for logs.
std::string describe(const UpdateCheck& update, const AttentionCheck& attention);

}  // namespace combiner::train
