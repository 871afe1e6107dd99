// A training run small enough for a unit test: Fashion-MNIST, one 16-wide layer, batch 4 in two
// micro-batches, dropout on (so resuming must restore the dropout RNG too), one thread. And a
// model with its AdamW, for tests of the update outside a run.
#pragma once

#include <algorithm>
#include <memory>
#include <string>

#include "config/config.h"
#include "model/transformer.h"
#include "train/optimizer.h"

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

// The model of a config and the AdamW a run of it makes, the weights drawn from seed 7.
struct ModelRun {
  model::ImageTransformer model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
};

inline ModelRun make_model_run(const config::Config& c) {
  torch::manual_seed(7);
  ModelRun r;
  r.model = model::ImageTransformer(model::TransformerOptions::from_config(c));
  r.optimizer = make_optimizer(r.model, c.train);
  return r;
}

}  // namespace combiner::train
