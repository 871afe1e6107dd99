// Learning-rate schedule: linear warmup to the peak, then cosine decay to a floor.
#pragma once

#include <cstdint>

#include "config/config.h"

namespace combiner::train {

// Learning rate of update `step` (0-based). Warmup: lr * (step + 1) / warmup_steps, so the peak is
// reached at step warmup_steps - 1; then cosine from lr down to min_lr, which the last update
// (steps - 1) uses exactly.
double learning_rate(const config::TrainConfig& train, int64_t step);

}  // namespace combiner::train
