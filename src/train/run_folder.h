// The run folder (train.out_dir) before the first step: checked without touching it while the
// inputs are read, and written (created, config.yaml) only once every input has passed, so a run
// refused for bad input leaves the folder as it was, or absent if it did not exist.
#pragma once

#include <string>

#include "config/config.h"

namespace combiner::train {

// Reads only: the folder (or, if it does not exist yet, its nearest existing parent) is a folder
// this process can write; without resume it holds no checkpoints. std::invalid_argument for a
// folder that holds checkpoints, std::runtime_error naming the path for one that cannot be made
// or written.
void check_run_folder(const std::string& dir, bool resume);

// Creates config.train.out_dir and writes config.yaml (the resolved config) into it atomically.
// On failure, folders this call created are removed again and std::runtime_error names the path.
void write_run_folder(const config::Config& config);

}  // namespace combiner::train
