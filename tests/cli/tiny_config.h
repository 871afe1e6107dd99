// The smallest useful training run of the CLI tests: 1 layer x 16 on Fashion-MNIST, 3 steps,
// no final test, its run folder inside `dir`.
#pragma once

#include <fstream>
#include <string>

#include "test_utils.h"

namespace combiner::testing {

// Writes dir/tiny.yaml and returns its path.
inline std::string tiny_config(const TempDir& dir) {
  const std::string path = dir.file("tiny.yaml");
  std::ofstream(path) << "data: {dataset: fashion_mnist, val_size: 6}\n"
                         "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2,\n"
                         "        attention: {type: combiner-axial-rowmajor}}\n"
                         "train: {steps: 3, batch_size: 2, warmup_steps: 1, threads: 1,\n"
                         "        final_test: false, out_dir: " +
                             dir.file("run") + "}\n";
  return path;
}

}  // namespace combiner::testing
