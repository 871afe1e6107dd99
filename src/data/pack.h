// combiner-data pack: a dataset's published files, read once with the strict readers, written
// as one packed file per official split (data/packed.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace combiner::data {

struct PackOptions {
  std::string dataset;          // fashion_mnist | cifar10 | imagenet64 | imagenet32
  std::string from;             // folder of the published files ("" = the dataset's default folder)
  std::string out;              // folder for train.pack and test.pack; created if missing
  bool force = false;           // replace packed files already in `out`
  double progress_every_s = 5;  // seconds between progress lines (images/s, ETA)
};

// Writes out/train.pack and out/test.pack and returns their paths. Both are written to
// temporary files first and renamed only when both are complete, so a failure (a bad input
// file, a full disk) leaves whatever `out` held before untouched. std::invalid_argument when
// `out` already holds packed files and !force, or for an unknown dataset; std::runtime_error
// naming the file for unreadable input or output.
std::vector<std::string> pack_dataset(const PackOptions& options);

}  // namespace combiner::data
