// The training loop: AdamW (train/optimizer.h) with warmup + cosine learning rate, gradient
// accumulation and clipping, periodic validation, checkpoints and exact resume, in one process or
// data-parallel over several (train/distributed.h): each rank takes its slice of every global
// batch.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"
#include "train/distributed.h"

namespace combiner::train {

struct RunOptions {
  bool resume = false;     // continue from the newest valid checkpoint in train.out_dir
  int64_t stop_after = 0;  // end this invocation after so many updates (checkpointed); 0 = run all
  LaunchEnvironment launch;  // this process's rank in the job (read_launch_environment())
  // Fault injection for tests: the loss of these (0-based) steps is made NaN.
  std::vector<int64_t> nan_loss_steps;
  // For tests: the step a CUDA graph captures (train/captured_step.h), run uncaptured, on any
  // device where train.cuda_graph auto would not capture it.
  bool uncaptured_static_step = false;
};

struct RunResult {
  std::optional<double> test_bits_per_dim;  // when train.final_test
  std::string final_checkpoint;
  bool main_process = true;   // rank 0: the one process that prints results
  int stop_signal = 0;        // SIGINT/SIGTERM that ended the run early (checkpointed), or 0
  int64_t skipped_steps = 0;  // updates skipped for a non-finite loss or gradient
};

// Stops early, after a checkpoint, when util::stop_requested() (SIGINT/SIGTERM, see
// util/stop_signal.h) at the end of a step; an update whose loss or gradient is not finite is
// skipped, and train.max_nonfinite_steps of them in a row stop the run (std::runtime_error)
// with the last checkpoint untouched.
// Throws std::invalid_argument / std::runtime_error for bad config, data, or run folders.
RunResult run_training(const config::Config& config, const RunOptions& options);

}  // namespace combiner::train
