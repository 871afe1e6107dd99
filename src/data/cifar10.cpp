// CIFAR-10 binary batches. Each file's size is checked against the 10000 x 3073 bytes it must
// hold, then it is read whole and each record's planes interleaved into sequence order.
#include "data/cifar10.h"

#include <filesystem>
#include <stdexcept>

#include "data/file_bytes.h"

namespace combiner::data {
namespace {

constexpr int64_t kPixels = 32 * 32;
constexpr int64_t kImageBytes = 3 * kPixels;       // 3072
constexpr int64_t kRecordBytes = 1 + kImageBytes;  // label byte first

std::string size_problem(const std::string& name, uint64_t size) {
  const int64_t expected = kCifarRecordsPerFile * kRecordBytes;
  return "cifar10: '" + name + "' must hold 10000 records of 3073 bytes: expected " +
         std::to_string(expected) + " bytes, found " + std::to_string(size) +
         (static_cast<int64_t>(size) < expected ? " (truncated download?)"
                                                : " (not a CIFAR-10 binary batch?)");
}

// Interleaves one checked batch file into set at image first (set's pixels are sized for it).
void parse_batch_into(
    const uint8_t* data, size_t size, const std::string& name, ImageSet& set, int64_t first) {
  if (static_cast<int64_t>(size) != kCifarRecordsPerFile * kRecordBytes)
    throw std::runtime_error(size_problem(name, size));
  for (int64_t r = 0; r < kCifarRecordsPerFile; ++r)
    planar_to_interleaved(
        data + r * kRecordBytes + 1, kPixels, 3, set.pixels.data() + (first + r) * kImageBytes);
}

// The size is checked before the file is read, so a wrong file costs no memory.
void read_batch_into(const std::string& path, ImageSet& set, int64_t first) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) throw std::runtime_error("cifar10: cannot read '" + path + "': " + error.message());
  if (static_cast<int64_t>(size) != kCifarRecordsPerFile * kRecordBytes)
    throw std::runtime_error(size_problem(path, size));
  const std::vector<uint8_t> bytes = read_file_bytes(path, "cifar10");
  parse_batch_into(bytes.data(), bytes.size(), path, set, first);
}

ImageSet empty_batch() {
  ImageSet set;
  set.shape = {32, 32, 3};
  set.count = kCifarRecordsPerFile;
  set.pixels.resize(set.count * kImageBytes);
  return set;
}

}  // namespace

void planar_to_interleaved(const uint8_t* planar, int64_t pixels, int64_t channels, uint8_t* out) {
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = planar + c * pixels;
    for (int64_t p = 0; p < pixels; ++p) out[p * channels + c] = plane[p];
  }
}

ImageSet read_cifar10_batch(const std::string& path) {
  ImageSet set = empty_batch();
  read_batch_into(path, set, 0);
  return set;
}

ImageSet parse_cifar10_batch(const uint8_t* data, size_t size, const std::string& name) {
  if (static_cast<int64_t>(size) != kCifarRecordsPerFile * kRecordBytes)
    throw std::runtime_error(size_problem(name, size));
  ImageSet set = empty_batch();
  parse_batch_into(data, size, name, set, 0);
  return set;
}

ImageSet load_cifar10(const std::string& dir, OfficialSplit split) {
  std::vector<std::string> names;
  if (split == OfficialSplit::kTrain)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  // Check every file exists before reading any, so the error lists all that are missing.
  std::string missing;
  for (const auto& name : names)
    if (!std::filesystem::exists(std::filesystem::path(dir) / name))
      missing += (missing.empty() ? "" : ", ") + name;
  if (!missing.empty())
    throw std::runtime_error("cifar10: missing " + missing + " in '" + dir +
                             "' (expected the binary version: data_batch_1..5.bin, "
                             "test_batch.bin; see scripts/get-cifar10.sh)");
  ImageSet set;
  set.shape = {32, 32, 3};
  set.count = kCifarRecordsPerFile * static_cast<int64_t>(names.size());
  set.pixels.resize(set.count * kImageBytes);
  for (size_t i = 0; i < names.size(); ++i)
    read_batch_into((std::filesystem::path(dir) / names[i]).string(),
                    set,
                    static_cast<int64_t>(i) * kCifarRecordsPerFile);
  return set;
}

}  // namespace combiner::data
