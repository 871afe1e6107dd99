// CIFAR-10 binary batches. Each file is read whole in one call, its size checked against the
// 10000 x 3073 bytes it must hold, and each record's planes interleaved into sequence order.
#include "data/cifar10.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace combiner::data {
namespace {

constexpr int64_t kPixels = 32 * 32;
constexpr int64_t kImageBytes = 3 * kPixels;       // 3072
constexpr int64_t kRecordBytes = 1 + kImageBytes;  // label byte first

// Appends one checked batch file to set (whose pixels are already sized for it).
void read_batch_into(const std::string& path, ImageSet& set, int64_t first) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) throw std::runtime_error("cifar10: cannot read '" + path + "': " + error.message());
  const int64_t expected = kCifarRecordsPerFile * kRecordBytes;
  if (static_cast<int64_t>(size) != expected)
    throw std::runtime_error(
        "cifar10: '" + path + "' must hold 10000 records of 3073 bytes: " + "expected " +
        std::to_string(expected) + " bytes, found " + std::to_string(size) +
        (static_cast<int64_t>(size) < expected ? " (truncated download?)"
                                               : " (not a CIFAR-10 binary batch?)"));
  std::vector<uint8_t> raw(expected);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(raw.data()), expected);
  if (in.gcount() != expected)
    throw std::runtime_error("cifar10: read error in '" + path + "' after " +
                             std::to_string(in.gcount()) + " bytes");
  for (int64_t r = 0; r < kCifarRecordsPerFile; ++r)
    planar_to_interleaved(raw.data() + r * kRecordBytes + 1,
                          kPixels,
                          3,
                          set.pixels.data() + (first + r) * kImageBytes);
}

}  // namespace

void planar_to_interleaved(const uint8_t* planar, int64_t pixels, int64_t channels, uint8_t* out) {
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = planar + c * pixels;
    for (int64_t p = 0; p < pixels; ++p) out[p * channels + c] = plane[p];
  }
}

ImageSet read_cifar10_batch(const std::string& path) {
  ImageSet set;
  set.shape = {32, 32, 3};
  set.count = kCifarRecordsPerFile;
  set.pixels.resize(set.count * kImageBytes);
  read_batch_into(path, set, 0);
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
