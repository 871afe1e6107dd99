// The run folder (train.out_dir) before the first step: checked, and locked for this trainer if a
// trainer has run there, while the inputs are read; created and written (config.yaml) only once
// every input has passed, so a run refused for bad input leaves the folder as it was (but for the
// pid in an existing train.lock), or absent if it did not exist.
#pragma once

#include <optional>
#include <string>

#include "config/config.h"
#include "train/run_lock.h"

namespace combiner::train {

// The folder (or, if it does not exist yet, its nearest existing parent) is a folder this process
// can write; one that holds a train.lock is locked for this trainer (RunFolderLock: refused,
// naming the holder, while another trainer runs there); without resume it holds no checkpoints.
// Returns the lock (none where the folder or its train.lock is still to be made).
// std::invalid_argument for a folder that holds checkpoints, std::runtime_error naming the path
// for one that cannot be made, written or locked.
std::optional<RunFolderLock> check_run_folder(const std::string& dir, bool resume);

// Creates config.train.out_dir, locks it if `lock` is empty (then checks again for checkpoints:
// another trainer may have started there since the check), and writes config.yaml (the resolved
// config) into it atomically. On failure, folders this call created are removed again and
// std::runtime_error names the path.
void write_run_folder(const config::Config& config, bool resume,
                      std::optional<RunFolderLock>& lock);

}  // namespace combiner::train
