// Dataset registry and load_split: maps a dataset name to its shape, default folder and
// reader, and carves the validation set out of the end of the official training set so that
// train and val never overlap and the official test set stays untouched.
#include "data/dataset.h"

#include <filesystem>
#include <stdexcept>

#include "data/cifar10.h"
#include "data/fashion_mnist.h"
#include "data/imagenet64.h"

namespace combiner::data {
namespace {

void check_known(const std::string& dataset) {
  for (const auto& name : dataset_names())
    if (name == dataset) return;
  std::string known;
  for (const auto& name : dataset_names()) known += (known.empty() ? "" : ", ") + name;
  throw std::invalid_argument("data.dataset: unknown dataset '" + dataset + "', expected one of " +
                              known);
}

ImageSet load_official(const std::string& dataset, const std::string& dir, OfficialSplit split) {
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error("data: folder '" + dir + "' for dataset " + dataset +
                             " does not exist; see data/README.md for the expected files");
  if (dataset == "fashion_mnist") return load_fashion_mnist(dir, split);
  if (dataset == "cifar10") return load_cifar10(dir, split);
  return load_imagenet64(dir, split);
}

}  // namespace

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"fashion_mnist", "cifar10", "imagenet64"};
  return names;
}

ImageShape dataset_shape(const std::string& dataset) {
  check_known(dataset);
  if (dataset == "fashion_mnist") return {28, 28, 1};
  if (dataset == "cifar10") return {32, 32, 3};
  return {64, 64, 3};
}

std::string default_dir(const std::string& dataset) {
  check_known(dataset);
  // Debian's dataset-fashion-mnist package installs the four idx files here.
  if (dataset == "fashion_mnist") return "/usr/share/datasets/fashion-mnist";
  if (dataset == "cifar10") return "data/cifar-10-batches-bin";
  return "data/imagenet64";
}

ImageSet load_split(const DataOptions& options, Split split) {
  check_known(options.dataset);
  if (options.val_size < 0)
    throw std::invalid_argument("data.val_size: expected >= 0, found " +
                                std::to_string(options.val_size));
  const std::string dir = options.dir.empty() ? default_dir(options.dataset) : options.dir;
  const OfficialSplit official =
      split == Split::kTest ? OfficialSplit::kTest : OfficialSplit::kTrain;
  ImageSet set = load_official(options.dataset, dir, official);
  const ImageShape expected = dataset_shape(options.dataset);
  if (!(set.shape == expected) ||
      static_cast<int64_t>(set.pixels.size()) != set.count * expected.length())
    throw std::runtime_error("data: reader for " + options.dataset + " in '" + dir +
                             "' returned images of the wrong shape or size");

  if (split != Split::kTest) {
    if (options.val_size >= set.count)
      throw std::invalid_argument("data.val_size: " + std::to_string(options.val_size) +
                                  " leaves no training images; the " + options.dataset +
                                  " training set in '" + dir + "' holds " +
                                  std::to_string(set.count));
    const int64_t L = expected.length();
    const int64_t train_count = set.count - options.val_size;
    if (split == Split::kTrain) {
      // No shrink_to_fit: for ImageNet it would copy 15 GB to free a few MB.
      set.pixels.resize(train_count * L);
      set.count = train_count;
    } else {
      std::vector<uint8_t> val(set.pixels.begin() + train_count * L, set.pixels.end());
      set.pixels = std::move(val);
      set.count = options.val_size;
    }
  }
  if (set.count == 0)
    throw std::runtime_error("data: the " + std::string(split_name(split)) + " split of " +
                             options.dataset + " in '" + dir + "' is empty" +
                             (split == Split::kVal ? " (data.val_size is 0)" : ""));
  return set;
}

}  // namespace combiner::data
