// ImageNet 64x64 from a folder of PNGs (decoded in parallel with stb_image into preallocated
// slots, so the order is the sorted file order whatever the thread count) or from
// image-net.org's npz batches (data.npy members, channel-planar rows, interleaved here).
#include "data/imagenet64.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <stb/stb_image.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/cifar10.h"
#include "data/zip.h"
#include "util/npy.h"

namespace combiner::data {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kSide = 64;
constexpr int64_t kPixels = kSide * kSide;
constexpr int64_t kImageBytes = 3 * kPixels;  // 12288
constexpr int kNpzTrainBatches = 10;
constexpr const char* kNpzMember = "data.npy";

std::vector<std::string> npz_names(OfficialSplit split) {
  if (split == OfficialSplit::kTest) return {"val_data.npz"};
  std::vector<std::string> names;
  for (int i = 1; i <= kNpzTrainBatches; ++i)
    names.push_back("train_data_batch_" + std::to_string(i) + ".npz");
  return names;
}

// Checks the data.npy header of an npz batch and returns its image count.
int64_t npz_count(const util::NpyHeader& header, const std::string& path) {
  if (header.dtype != torch::kUInt8 || header.shape.size() != 2 || header.shape[1] != kImageBytes)
    throw std::runtime_error(
        "imagenet64: '" + path + "' data.npy must be uint8 [N, 12288], found " + header.descr +
        " with " + std::to_string(header.shape.size()) + " dimensions" +
        (header.shape.size() == 2
             ? " [" + std::to_string(header.shape[0]) + ", " + std::to_string(header.shape[1]) + "]"
             : ""));
  return header.shape[0];
}

// Image count of an npz batch, from the header of its data.npy alone.
int64_t npz_batch_count(const std::string& path) {
  const auto head = read_zip_member(path, kNpzMember, 4096);
  return npz_count(util::parse_npy_header(head.data(), head.size(), path), path);
}

// Decodes the batch at path into out, which has room for the count images its header holds.
void read_npz_into(const std::string& path, int64_t count, uint8_t* out) {
  const auto bytes = read_zip_member(path, kNpzMember);
  const util::NpyHeader header = util::parse_npy_header(bytes.data(), bytes.size(), path);
  const size_t found = bytes.size() - header.data_offset;
  if (npz_count(header, path) != count || found != header.data_bytes())
    throw std::runtime_error("imagenet64: '" + path + "' data.npy: expected " +
                             std::to_string(count * kImageBytes) + " data bytes, found " +
                             std::to_string(found));
  const uint8_t* data = bytes.data() + header.data_offset;
  for (int64_t n = 0; n < count; ++n)
    planar_to_interleaved(data + n * kImageBytes, kPixels, 3, out + n * kImageBytes);
}

ImageSet load_npz(const std::string& dir, OfficialSplit split) {
  std::vector<std::string> paths;
  std::string missing;
  for (const auto& name : npz_names(split)) {
    paths.push_back((fs::path(dir) / name).string());
    if (!fs::exists(paths.back())) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty())
    throw std::runtime_error("imagenet64: npz folder '" + dir + "' lacks " + missing);
  spdlog::warn(
      "imagenet64: '{}' holds image-net.org's npz version (box-resized); its bits/dim are NOT "
      "comparable to published ImageNet-64 figures, which use van den Oord et al.'s version",
      dir);

  // Headers first, so the pixel buffer is allocated once at its final size.
  std::vector<int64_t> counts;
  ImageSet set;
  set.shape = {kSide, kSide, 3};
  for (const auto& path : paths) {
    counts.push_back(npz_batch_count(path));
    set.count += counts.back();
  }
  set.pixels.resize(set.count * kImageBytes);
  int64_t first = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    read_npz_into(paths[i], counts[i], set.pixels.data() + first * kImageBytes);
    first += counts[i];
  }
  return set;
}

}  // namespace

Imagenet64Format detect_imagenet64_format(const std::string& dir) {
  if (fs::is_directory(fs::path(dir) / "train") || fs::is_directory(fs::path(dir) / "valid"))
    return Imagenet64Format::kPng;
  if (fs::exists(fs::path(dir) / "val_data.npz") ||
      fs::exists(fs::path(dir) / "train_data_batch_1.npz"))
    return Imagenet64Format::kNpz;
  throw std::runtime_error(
      "imagenet64: '" + dir +
      "' holds neither train/ and valid/ folders of 64x64 PNGs (van den Oord et al. version) nor "
      "train_data_batch_1..10.npz and val_data.npz (image-net.org version); see data/README.md");
}

ImageSet read_png_folder(const std::string& folder) {
  if (!fs::is_directory(folder))
    throw std::runtime_error("imagenet64: folder '" + folder + "' does not exist");
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.is_regular_file() && entry.path().extension() == ".png")
      files.push_back(entry.path().filename().string());
  if (files.empty()) throw std::runtime_error("imagenet64: no .png files in '" + folder + "'");
  std::sort(files.begin(), files.end());
  if (files.size() > 1000)
    spdlog::info("imagenet64: decoding {} PNGs from '{}'", files.size(), folder);

  ImageSet set;
  set.shape = {kSide, kSide, 3};
  set.count = static_cast<int64_t>(files.size());
  set.pixels.resize(set.count * kImageBytes);
  // at::parallel_for rethrows the first exception a worker throws.
  at::parallel_for(0, set.count, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const std::string path = (fs::path(folder) / files[i]).string();
      int width = 0, height = 0, channels = 0;
      std::unique_ptr<stbi_uc, void (*)(void*)> image(
          stbi_load(path.c_str(), &width, &height, &channels, 0), stbi_image_free);
      if (!image)
        throw std::runtime_error("imagenet64: cannot decode '" + path +
                                 "': " + stbi_failure_reason());
      if (width != kSide || height != kSide || channels != 3)
        throw std::runtime_error("imagenet64: '" + path + "' is " + std::to_string(width) + "x" +
                                 std::to_string(height) + " with " + std::to_string(channels) +
                                 " channels, expected 64x64 with 3 (RGB)");
      std::copy(image.get(), image.get() + kImageBytes, set.pixels.data() + i * kImageBytes);
    }
  });
  return set;
}

ImageSet read_imagenet64_npz(const std::string& path) {
  ImageSet set;
  set.shape = {kSide, kSide, 3};
  set.count = npz_batch_count(path);
  set.pixels.resize(set.count * kImageBytes);
  read_npz_into(path, set.count, set.pixels.data());
  return set;
}

ImageSet load_imagenet64(const std::string& dir, OfficialSplit split) {
  if (detect_imagenet64_format(dir) == Imagenet64Format::kNpz) return load_npz(dir, split);
  return read_png_folder(
      (fs::path(dir) / (split == OfficialSplit::kTrain ? "train" : "valid")).string());
}

}  // namespace combiner::data
