// Loading a split of a named dataset: the one entry point the trainer and eval use.
#pragma once

#include <string>
#include <vector>

#include "data/image_set.h"
#include "data/options.h"

namespace combiner::data {

const std::vector<std::string>& dataset_names();
ImageShape dataset_shape(const std::string& dataset);  // invalid_argument for an unknown name
std::string default_dir(const std::string& dataset);   // where the dataset lives by default

// train: the official training set minus its last val_size images; val: those last val_size
// images; test: the official test set. Throws std::runtime_error naming the file and what is
// wrong for missing, short or corrupt files, and for an empty split.
ImageSet load_split(const DataOptions& options, Split split);

}  // namespace combiner::data
