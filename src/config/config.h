// The whole run's configuration as plain structs: every YAML key is a field here, with its
// default and meaning. load_config() reads YAML, apply_override() applies --set a.b=value, and
// validate() checks every range once; after that the code trusts the struct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attention/options.h"
#include "data/options.h"

namespace combiner::config {

struct ModelConfig {
  int64_t layers = 4;     // transformer blocks
  int64_t width = 128;    // residual stream width (d_model); must be divisible by heads
  int64_t heads = 4;      // attention heads; head dim = width / heads
  int64_t mlp_ratio = 4;  // MLP hidden width = mlp_ratio * width
  double dropout = 0.0;   // on attention output, MLP output and embeddings; in [0, 1)
  attention::AttentionOptions attention;
};

struct TrainConfig {
  int64_t steps = 1000;        // optimizer updates
  int64_t batch_size = 16;     // images per update (all micro-batches together)
  int64_t grad_accum = 1;      // micro-batches per update; must divide batch_size
  double lr = 1e-3;            // peak learning rate, reached at the end of warmup
  int64_t warmup_steps = 100;  // linear warmup from 0 to lr
  double min_lr = 1e-5;        // cosine decay floor, reached at the last step
  double weight_decay = 0.01;  // AdamW decoupled weight decay (matrices only)
  double beta1 = 0.9;          // AdamW betas
  double beta2 = 0.95;
  double grad_clip = 1.0;                // max global gradient norm; 0 = no clipping
  int64_t max_nonfinite_steps = 10;      // skipped updates (NaN/inf) in a row before the run stops
  double ema_decay = 0.0;                // EMA of the weights after every update; 0 = none kept
  int64_t seed = 0;                      // parameters, data order and dropout
  int64_t threads = 0;                   // LibTorch intra-op threads; 0 = every core
  std::string out_dir = "runs/default";  // run folder: checkpoints, metrics.jsonl, config.yaml
  int64_t checkpoint_every = 0;          // steps between checkpoints; 0 = only at the end
  int64_t keep_checkpoints = 3;          // newest checkpoints kept in out_dir
  int64_t eval_every = 0;       // steps between validation passes; 0 = never during training
  int64_t eval_batch_size = 0;  // images per evaluation batch; 0 = batch_size
  int64_t log_every = 10;       // steps between console lines
  bool final_test = true;       // evaluate test bits/dim after the last step
  int64_t sample_every = 0;     // steps between sample grids in out_dir; 0 = never
  int64_t sample_count = 16;    // images in each sample grid
  bool tensorboard = true;      // TensorBoard event files in out_dir/tb/ (rank 0)
  // Scale-out: recompute each block's activations in backward (memory for time): false, true, or
  // auto (the fastest of nothing, the MLP halves or whole blocks recomputed whose step fits the
  // device's memory, measured at the start: train/memory_plan.h); the math precision of the
  // blocks (bfloat16 = autocast, fp32 master weights, attention softmax and logits in fp32); the
  // device; how long a collective waits for the other ranks.
  std::string activation_checkpointing = "false";  // false | true | auto
  bool recompute_mlp = false;         // recompute the MLP halves only (no effect with the above)
  std::string precision = "float32";  // float32 | bfloat16 | auto (bfloat16 on CUDA)
  // Which implementation the Combiner variants with fused kernels run: auto = the fused CUDA
  // kernels where they apply (CUDA, float32/bfloat16, D 32/64/128), else the LibTorch
  // composition; composed = always the LibTorch composition (the fused path's reference); fused =
  // always the fused path (on the CPU the kernels' model: slow; for counting memory there).
  std::string attention_path = "auto";
  // auto = on CUDA, the whole step (forward, backward, clipping, AdamW, EMA) captured once as a
  // CUDA graph and replayed, where the run allows it (one process, no recomputation in backward);
  // off = every step launched op by op.
  std::string cuda_graph = "auto";
  std::string device = "auto";   // auto | cpu | cuda | cuda:N
  int64_t dist_timeout_s = 300;  // seconds; a rank that dies stops the others after this
};

// The names train.precision accepts.
const std::vector<std::string>& precision_names();
// The precision the blocks run in on CUDA (cuda true) or the CPU: train.precision, auto resolved
// (bfloat16 on CUDA, float32 on the CPU, where Debian's LibTorch multiplies bf16 slowly).
std::string precision_on(const TrainConfig& t, bool cuda);
// The names train.attention_path accepts.
const std::vector<std::string>& attention_path_names();
// The values train.activation_checkpointing accepts: false, true, auto.
const std::vector<std::string>& activation_checkpointing_names();
// The names train.cuda_graph accepts.
const std::vector<std::string>& cuda_graph_names();

struct Config {
  data::DataOptions data;
  ModelConfig model;
  TrainConfig train;
};

// Reads and validates a YAML file. Throws std::invalid_argument whose message starts with the
// file path and names the key (e.g. "model.attention.type") and what was expected.
Config load_config(const std::string& path);

// Parses YAML text (`source` names it in errors), without validating.
Config parse_config(const std::string& yaml_text, const std::string& source);

// Applies one "--set key.path=value" override with the same parsing as the file.
void apply_override(Config& config, const std::string& assignment);

// Checks every range and resolves defaults that depend on the dataset: attention.block and
// attention.row_len of 0 become one image row (width * channels subpixels).
void validate(Config& config);

// The part of validate() that needs no dataset: each key's range and choices and the rules that
// relate two keys. Throws std::invalid_argument naming the key, as validate() does.
void check_values(const Config& config);

// The resolved config as YAML that parse_config() reads back to an equal Config.
std::string to_yaml(const Config& config);

// The same YAML with each key's range and default beside its meaning in the comment: what
// `combiner-train --print-config` prints; parse_config() reads it back to an equal Config.
std::string to_documented_yaml(const Config& config);

// Every valid key path, e.g. "train.lr", in file order.
std::vector<std::string> key_paths();

}  // namespace combiner::config
