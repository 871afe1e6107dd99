// The training loop: AdamW with warmup + cosine learning rate, gradient accumulation and
// clipping, periodic validation, checkpoints and exact resume, in one process or data-parallel
// over several (train/distributed.h): each rank takes its slice of every global batch.
#pragma once

#include <optional>
#include <string>

#include "config/config.h"
#include "train/distributed.h"

namespace combiner::train {

struct RunOptions {
  bool resume = false;     // continue from the newest valid checkpoint in train.out_dir
  int64_t stop_after = 0;  // end this invocation after so many updates (checkpointed); 0 = run all
  LaunchEnvironment launch;  // this process's rank in the job (read_launch_environment())
};

struct RunResult {
  std::optional<double> test_bits_per_dim;  // when train.final_test
  std::string final_checkpoint;
  bool main_process = true;  // rank 0: the one process that prints results
};

// Throws std::invalid_argument / std::runtime_error for bad config, data, or run folders.
RunResult run_training(const config::Config& config, const RunOptions& options);

}  // namespace combiner::train
