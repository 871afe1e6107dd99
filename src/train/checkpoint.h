// Checkpoints hold the whole run: the model's tensors, the optimizer's state, the step, the data
// position, the dropout RNG and the resolved config, so --resume continues the same curve; and
// the LibTorch that wrote them, as either build reads the other's (train/optimizer_state.h).
// File: 8-byte magic, payload size, CRC-32, then a torch pickle of the state. Written to a
// temporary file, fsynced, renamed and the folder fsynced, so neither a crash nor a full disk
// leaves a half checkpoint under the final name.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::config {
struct Config;
}

namespace combiner::train {

struct Checkpoint {
  std::string config_yaml;   // the resolved config of the run
  int64_t step = 0;          // optimizer updates done
  int64_t samples_seen = 0;  // training images consumed: the data position
  std::vector<std::pair<std::string, torch::Tensor>> model;  // parameters and buffers by name
  std::vector<char> optimizer;  // torch::optim serialisation of the optimizer
  torch::Tensor rng_state;      // LibTorch's default CPU generator (dropout)
  std::vector<std::pair<std::string, torch::Tensor>> ema;  // empty unless train.ema_decay > 0
  std::string written_by = {};  // read back: the writer's LibTorch, "LibTorch 2.11.0" ("" in
                                // older files); save_checkpoint records this build's
};

// std::runtime_error "checkpoint: cannot write '<path>': <reason>; the previous checkpoints are
// kept" if the folder is not writable or the disk fills up; nothing is left under path then.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// Throws std::runtime_error naming the file if it is missing, truncated, corrupt or not ours.
Checkpoint load_checkpoint(const std::string& path);
// The same for a whole checkpoint file held in memory; name is used in messages.
Checkpoint parse_checkpoint(const char* data, size_t size, const std::string& name);

// Captures and restores a module's named parameters and buffers. restore_model throws
// std::runtime_error listing every missing, unexpected or mis-shaped tensor by name.
std::vector<std::pair<std::string, torch::Tensor>> capture_model(const torch::nn::Module& model);
void restore_model(torch::nn::Module& model,
                   const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                   const std::string& source);

// Throws std::runtime_error naming source and every architecture key (data.dataset and the
// model.* keys but dropout) whose value differs between the checkpoint's config and config,
// which must be validated. restore_model cannot see these differences when the tensors still
// fit: the attention variants without learned maps, model.heads, block and row_len.
void check_same_architecture(const Checkpoint& checkpoint,
                             const config::Config& config,
                             const std::string& source);
// The same against the YAML of a saved config (a safetensors file's metadata).
void check_same_architecture(const std::string& saved_config_yaml,
                             const config::Config& config,
                             const std::string& source);

std::vector<char> capture_optimizer(torch::optim::Optimizer& optimizer);
// The AdamW state of a checkpoint loaded from path, whichever LibTorch wrote it
// (train/optimizer_state.h). Throws std::runtime_error, one line, naming path, the LibTorch that
// wrote the checkpoint and what to do, when this build cannot use it; the optimizer is unchanged.
void restore_optimizer(torch::optim::AdamW& optimizer,
                       const Checkpoint& checkpoint,
                       const std::string& path);

// Checkpoints of a run folder: out_dir/checkpoints/step-00001000.ckpt, sorted oldest first.
std::string checkpoint_path(const std::string& out_dir, int64_t step);
std::vector<std::string> list_checkpoints(const std::string& out_dir);
// Removes all but the newest `keep` checkpoints (after a newer one is complete).
void prune_checkpoints(const std::string& out_dir, int64_t keep);

}  // namespace combiner::train
