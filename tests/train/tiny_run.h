// A training run small enough for a unit test: Fashion-MNIST, one 16-wide layer, batch 4 in two
// micro-batches, dropout on (so resuming must restore the dropout RNG too), one thread.
#pragma once

#include <algorithm>
#include <string>

#include "config/config.h"

namespace combiner::train {

inline config::Config tiny_run(const std::string& out_dir, int64_t steps) {
  config::Config c;
  c.data.dataset = "fashion_mnist";
  c.data.val_size = 8;
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.mlp_ratio = 2;
  c.model.dropout = 0.1;  // so the dropout RNG state must be restored too
  c.train.steps = steps;
  c.train.batch_size = 4;
  c.train.grad_accum = 2;
  c.train.warmup_steps = std::min<int64_t>(2, steps);
  c.train.lr = 3e-3;
  c.train.out_dir = out_dir;
  c.train.final_test = false;
  c.train.log_every = 1000;
  c.train.threads = 1;
  config::validate(c);
  return c;
}

}  // namespace combiner::train
