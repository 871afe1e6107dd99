// A trained model as a safetensors file, for Python and PyTorch users: the tensors under their
// names in the module tree (as in checkpoints), fp32 or bf16, and in __metadata__ the resolved
// config ("config", YAML), "step", "weights" (model or ema), "dtype" and safetensors' own
// "format": "pt". combiner-eval and combiner-sample load such a file wherever they take a
// checkpoint, building the model from the config in it.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "train/model_loading.h"

namespace combiner::train {

struct ExportOptions {
  bool ema = false;  // the checkpoint's moving average instead of the weights
  torch::ScalarType dtype = torch::kFloat;  // kFloat or kBFloat16 for floating tensors
  bool force = false;                       // replace an existing output file
};

struct ExportSummary {
  int64_t tensors = 0;
  int64_t parameters = 0;  // elements over every tensor
  uint64_t bytes = 0;      // size of the file written
  int64_t step = 0;
  std::string weights;  // "model" or "ema"
};

// Writes checkpoint_path's model as a safetensors file at out_path, atomically. Throws
// std::invalid_argument if out_path exists and !options.force, std::runtime_error for an
// unreadable checkpoint (see load_model) or a file that cannot be written (out_path untouched).
ExportSummary export_safetensors(const std::string& checkpoint_path,
                                 const std::string& out_path,
                                 const ExportOptions& options);

// True for a path ending in ".safetensors": load_model reads those with the function below.
bool is_safetensors_path(const std::string& path);

// The model of an exported file, its config with `overrides` applied and validated. Throws
// std::runtime_error, one line naming the file and the tensors, when the header does not parse,
// the config is missing, or a tensor is missing, extra, or of a dtype or shape the config's model
// does not have; `ema` is refused (the file holds one set of weights).
LoadedModel load_safetensors_model(const std::string& path,
                                   const std::vector<std::string>& overrides,
                                   bool ema);

}  // namespace combiner::train
