// Loading a split of a named dataset: the one entry point the trainer and eval use.
#pragma once

#include <string>
#include <vector>

#include "data/image_set.h"
#include "data/options.h"
#include "data/packed.h"

namespace combiner::data {

// fashion_mnist, cifar10, imagenet64, imagenet32 (each of a fixed shape) and images (any folder of
// images packed by `combiner-data pack --from FOLDER`: its shape is the packed header's).
const std::vector<std::string>& dataset_names();
// A named dataset's shape; std::invalid_argument for an unknown name and for `images`.
ImageShape dataset_shape(const std::string& dataset);
// The shape of options' images: data.height/width/channels when set, else the named dataset's
// or, for `images`, the header of options.dir's train.pack. std::invalid_argument naming the key.
ImageShape dataset_shape(const DataOptions& options);
// Bits per subpixel of options' images: data.bits when set, else 8 for a named dataset or, for
// `images`, the packed header's. std::invalid_argument naming the key.
int64_t dataset_bits(const DataOptions& options);
// Fills options.height/width/channels/bits with dataset_shape and dataset_bits; returns the shape.
ImageShape resolve_shape(DataOptions& options);
std::string default_dir(const std::string& dataset);  // where it lives by default ("" for images)

// train: the official training set minus its last val_size images; val: those last val_size
// images; test: the official test set. Throws std::runtime_error naming the file and what is
// wrong for missing, short or corrupt files, and for an empty split.
// A folder holding packed files (train.pack, test.pack: data/packed.h) is read by memory map and
// val is a slice of the mapped training file; `verify` says when a large file's payload
// checksum is checked (small ones always at once). Any other folder is read in the dataset's
// published format, into memory.
ImageSet load_split(const DataOptions& options,
                    Split split,
                    PackedFile::Verify verify = PackedFile::Verify::kNow);

// Both halves of the official training set from one read (or one mapping): what training uses.
// val is empty (count 0) when data.val_size is 0.
struct TrainVal {
  ImageSet train;
  ImageSet val;
};
TrainVal load_train_val(const DataOptions& options,
                        PackedFile::Verify verify = PackedFile::Verify::kNow);

}  // namespace combiner::data
