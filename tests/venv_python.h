// The python of pip's torch environment (CMake's COMBINER_VENV_PYTHON), which has the real
// clients of our files: TensorBoard (with its data server), safetensors, torch 2.11, PIL. Tests
// that need it skip with kVenvMissing when the build was configured without it.
#pragma once

#include <string>

#include "cli/run_binary.h"

namespace combiner::testing {

// The one line a test skips with when COMBINER_VENV_PYTHON is empty.
inline const char* const kVenvMissing =
    "no python with tensorboard and safetensors: run scripts/setup-cuda-deps.sh, then configure "
    "with -DCOMBINER_VENV_PYTHON=$PWD/.cache/torch-venv/bin/python";

inline std::string venv_python() {
  return COMBINER_VENV_PYTHON;
}

// Runs `venv_python() tests/python/<script> <args>`; stdout and stderr together.
inline BinaryRun run_venv_script(const std::string& script, const std::string& args) {
  return run_shell(venv_python() + " " + COMBINER_SOURCE_DIR + "/tests/python/" + script + " " +
                   args);
}

}  // namespace combiner::testing
