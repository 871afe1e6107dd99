// Dataset registry and load_split: maps a dataset name to its shape, default folder and
// reader, and carves the validation set out of the end of the official training set so that
// train and val never overlap and the official test set stays untouched.
#include "data/dataset.h"

#include <spdlog/spdlog.h>

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

ImageSet load_packed(const std::string& dataset,
                     const std::string& dir,
                     OfficialSplit split,
                     PackedFile::Verify verify) {
  const std::string path = (std::filesystem::path(dir) / packed_file_name(split)).string();
  if (!std::filesystem::exists(path))
    throw std::runtime_error("data: '" + dir + "' holds packed files but not " +
                             packed_file_name(split) +
                             "; pack both splits with combiner-data pack");
  const auto file = PackedFile::open(path, verify);
  if (file->header().dataset != dataset)
    throw std::runtime_error(path + ": holds " + file->header().dataset +
                             " images, but data.dataset is " + dataset);
  ImageSet set = file->image_set();
  spdlog::info("data: mapped {} ({} images{})",
               path,
               set.count,
               file->header().payload_bytes() > PackedFile::kBackgroundAbove &&
                       verify == PackedFile::Verify::kBackground
                   ? ", checksum being verified in the background"
                   : ", checksum verified");
  return set;
}

ImageSet load_official(const std::string& dataset,
                       const std::string& dir,
                       OfficialSplit split,
                       PackedFile::Verify verify) {
  if (!std::filesystem::is_directory(dir))
    throw std::runtime_error("data: folder '" + dir + "' for dataset " + dataset +
                             " does not exist; see data/README.md for the expected files");
  if (holds_packed_files(dir)) return load_packed(dataset, dir, split, verify);
  if (dataset == "images")
    throw std::runtime_error("data: '" + dir +
                             "' holds no packed files; dataset images reads the output of "
                             "combiner-data pack --from FOLDER --size HxW --out DIR");
  if (dataset == "fashion_mnist") return load_fashion_mnist(dir, split);
  if (dataset == "cifar10") return load_cifar10(dir, split);
  return load_imagenet64(dir, split, dataset == "imagenet32" ? 32 : 64);
}

}  // namespace

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {
      "fashion_mnist", "cifar10", "imagenet64", "imagenet32", "images"};
  return names;
}

ImageShape dataset_shape(const std::string& dataset) {
  check_known(dataset);
  if (dataset == "images")
    throw std::invalid_argument(
        "data.dataset images: the shape comes from the packed files (data.dir) or "
        "data.height/width/channels, not from the name");
  if (dataset == "fashion_mnist") return {28, 28, 1};
  if (dataset == "cifar10" || dataset == "imagenet32") return {32, 32, 3};
  return {64, 64, 3};
}

namespace {
// "64 x 64 x 3": height x width x channels, as the messages about shapes write them.
std::string shape_text(const ImageShape& s) {
  return std::to_string(s.height) + " x " + std::to_string(s.width) + " x " +
         std::to_string(s.channels);
}

std::string train_pack_path(const DataOptions& options) {
  if (options.dir.empty())
    throw std::invalid_argument(
        "data.dir: dataset images needs the folder of its packed files (combiner-data pack "
        "--from FOLDER --size HxW --out DIR)");
  const std::string path =
      (std::filesystem::path(options.dir) / packed_file_name(OfficialSplit::kTrain)).string();
  if (!std::filesystem::exists(path))
    throw std::invalid_argument("data.dir: '" + options.dir + "' holds no " +
                                packed_file_name(OfficialSplit::kTrain) +
                                " (combiner-data pack --from FOLDER --size HxW --out DIR)");
  return path;
}
}  // namespace

ImageShape dataset_shape(const DataOptions& options) {
  check_known(options.dataset);
  const ImageShape given{options.height, options.width, options.channels};
  const bool any = given.height != 0 || given.width != 0 || given.channels != 0;
  if (options.dataset != "images") {
    const ImageShape fixed = dataset_shape(options.dataset);
    if (any && !(given == fixed))
      throw std::invalid_argument("data.height/width/channels: " + options.dataset +
                                  " images are " + shape_text(fixed) + ", got " + shape_text(given) +
                                  " (leave them at 0)");
    return fixed;
  }
  if (any) {
    if (given.height <= 0 || given.width <= 0 || given.channels <= 0)
      throw std::invalid_argument("data.height/width/channels: set all three or none, got " +
                                  shape_text(given));
    return given;
  }
  return read_packed_header(train_pack_path(options)).shape;
}

int64_t dataset_bits(const DataOptions& options) {
  check_known(options.dataset);
  if (options.bits < 0 || options.bits > 8)
    throw std::invalid_argument("data.bits: expected 1 to 8 (0: the dataset's), got " +
                                std::to_string(options.bits));
  if (options.dataset != "images") {
    if (options.bits != 0 && options.bits != 8)
      throw std::invalid_argument("data.bits: " + options.dataset + " holds 8-bit subpixels, got " +
                                  std::to_string(options.bits) + " (leave it at 0)");
    return 8;
  }
  if (options.bits != 0) return options.bits;
  // Unstated: the packed header's; with the shape stated and nothing packed yet (a preset
  // validated before its folder is packed), 8. Loading then checks the header against it.
  const bool shape_stated = options.height > 0 && options.width > 0 && options.channels > 0;
  const auto path = std::filesystem::path(options.dir) / packed_file_name(OfficialSplit::kTrain);
  if (shape_stated && (options.dir.empty() || !std::filesystem::exists(path))) return 8;
  return read_packed_header(train_pack_path(options)).bits;
}

ImageShape resolve_shape(DataOptions& options) {
  const bool unstated = options.dataset == "images" && options.height == 0 && options.width == 0 &&
                        options.channels == 0 && options.bits == 0;
  if (unstated) {  // shape and bits from one read of the header
    check_known(options.dataset);
    const PackedHeader header = read_packed_header(train_pack_path(options));
    options.bits = header.bits;
    options.height = header.shape.height;
    options.width = header.shape.width;
    options.channels = header.shape.channels;
    return header.shape;
  }
  const ImageShape shape = dataset_shape(options);
  options.bits = dataset_bits(options);
  options.height = shape.height;
  options.width = shape.width;
  options.channels = shape.channels;
  return shape;
}

std::string default_dir(const std::string& dataset) {
  check_known(dataset);
  if (dataset == "images") return "";
  // Debian's dataset-fashion-mnist package installs the four idx files here.
  if (dataset == "fashion_mnist") return "/usr/share/datasets/fashion-mnist";
  if (dataset == "cifar10") return "data/cifar-10-batches-bin";
  if (dataset == "imagenet32") return "data/imagenet32";
  return "data/imagenet64";
}

namespace {

std::string data_dir(const DataOptions& options) {
  check_known(options.dataset);
  if (options.val_size < 0)
    throw std::invalid_argument("data.val_size: expected >= 0, found " +
                                std::to_string(options.val_size));
  return options.dir.empty() ? default_dir(options.dataset) : options.dir;
}

ImageSet load_checked(const DataOptions& options,
                      const std::string& dir,
                      OfficialSplit official,
                      PackedFile::Verify verify) {
  ImageSet set = load_official(options.dataset, dir, official, verify);
  // `images` before its shape is resolved takes the header's (checked there).
  const bool unresolved = options.dataset == "images" && options.height == 0;
  const ImageShape expected = unresolved ? set.shape : dataset_shape(options);
  if (options.bits != 0 && set.bits != options.bits)
    throw std::runtime_error("data: '" + dir + "' holds " + std::to_string(set.bits) +
                             "-bit subpixels, but data.bits is " + std::to_string(options.bits));
  if (!(set.shape == expected)) {
    // Only a packed header can disagree (each published format has its dataset's shape).
    const bool packed = holds_packed_files(dir);
    const std::string file =
        packed ? (std::filesystem::path(dir) / packed_file_name(official)).string() : dir;
    throw std::runtime_error(
        "data: '" + file + "' holds " + shape_text(set.shape) +
        " images (height x width x channels), but the config asks for " + shape_text(expected) +
        (options.dataset == "images"
             ? " (data.height/width/channels); set them to the pack's shape, or to 0 to take it "
               "from the header, or repack with combiner-data pack --size"
             : " (" + options.dataset + "); repack it with combiner-data pack"));
  }
  if (!set.storage && static_cast<int64_t>(set.pixels.size()) != set.count * expected.length())
    throw std::runtime_error("data: reader for " + options.dataset + " in '" + dir + "' returned " +
                             std::to_string(set.pixels.size()) + " bytes for " +
                             std::to_string(set.count) + " images of " + shape_text(expected));
  return set;
}

void check_not_empty(const ImageSet& set,
                     Split split,
                     const DataOptions& options,
                     const std::string& dir) {
  if (set.count == 0)
    throw std::runtime_error("data: the " + std::string(split_name(split)) + " split of " +
                             options.dataset + " in '" + dir + "' is empty" +
                             (split == Split::kVal ? " (data.val_size is 0)" : ""));
}

// The official training set as train and val, val being its last val_size images. A mapped set
// is sliced; an in-memory one copies val out and keeps the rest in place (no shrink_to_fit: for
// ImageNet it would copy 15 GB to free a few MB).
TrainVal carve_val(ImageSet set, const DataOptions& options, const std::string& dir) {
  if (options.val_size >= set.count)
    throw std::invalid_argument(
        "data.val_size: " + std::to_string(options.val_size) + " leaves no training images; the " +
        options.dataset + " training set in '" + dir + "' holds " + std::to_string(set.count));
  const int64_t L = set.shape.length();
  const int64_t train_count = set.count - options.val_size;
  ImageSet val;
  val.shape = set.shape;
  val.bits = set.bits;
  val.count = options.val_size;
  if (set.storage) {
    val.storage = set.storage;
    val.first = set.first + train_count;
  } else {
    val.pixels.assign(set.pixels.begin() + train_count * L, set.pixels.end());
    set.pixels.resize(train_count * L);
  }
  set.count = train_count;
  return {std::move(set), std::move(val)};
}

}  // namespace

ImageSet load_split(const DataOptions& options, Split split, PackedFile::Verify verify) {
  const std::string dir = data_dir(options);
  if (split == Split::kTest) {
    ImageSet test = load_checked(options, dir, OfficialSplit::kTest, verify);
    check_not_empty(test, split, options, dir);
    return test;
  }
  TrainVal sets =
      carve_val(load_checked(options, dir, OfficialSplit::kTrain, verify), options, dir);
  ImageSet& set = split == Split::kTrain ? sets.train : sets.val;
  check_not_empty(set, split, options, dir);
  return std::move(set);
}

TrainVal load_train_val(const DataOptions& options, PackedFile::Verify verify) {
  const std::string dir = data_dir(options);
  return carve_val(load_checked(options, dir, OfficialSplit::kTrain, verify), options, dir);
}

}  // namespace combiner::data
