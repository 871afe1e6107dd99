#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace combiner::train {

double learning_rate(const config::TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * double(step + 1) / double(t.warmup_steps);
  const int64_t decay_steps = t.steps - t.warmup_steps - 1;
  if (decay_steps <= 0) return t.lr;
  const double progress = std::clamp(double(step - t.warmup_steps) / double(decay_steps), 0.0, 1.0);
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace combiner::train
