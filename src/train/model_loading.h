// Rebuilding a trained model from a checkpoint or an exported .safetensors file
// (train/safetensors_weights.h), for evaluation and sampling: the file's own config, with
// optional --set overrides (e.g. data.dir) applied and validated.
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"

namespace combiner::train {

struct LoadedModel {
  config::Config config;
  model::ImageTransformer model{nullptr};
  int64_t step = 0;
  std::string weights = "model";  // or "ema": which weights the model holds
};

// `ema`: load the checkpoint's moving average instead of the raw weights; throws
// std::runtime_error naming the file when it has none (trained with train.ema_decay = 0).
// A path ending in .safetensors is read as an exported file.
LoadedModel load_model(const std::string& checkpoint_path,
                       const std::vector<std::string>& overrides = {},
                       bool ema = false);

}  // namespace combiner::train
