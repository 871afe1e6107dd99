// ImageNet 64x64 from a folder of PNGs (decoded in parallel with libpng into preallocated
// slots, so the order is the sorted file order whatever the thread count) or from
// image-net.org's npz batches (data.npy members, channel-planar rows, interleaved here). Both
// decoders work on bytes in memory; the file versions read the bytes and call them.
#include "data/imagenet64.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/cifar10.h"
#include "data/file_bytes.h"
#include "data/zip.h"
#include "util/image_decode.h"
#include "util/npy.h"

namespace combiner::data {
namespace fs = std::filesystem;
namespace {

// The side being read (64, or 32 for ImageNet-32) and what follows from it.
struct Side {
  int64_t side = 64;
  int64_t pixels() const { return side * side; }
  int64_t bytes() const { return 3 * pixels(); }  // 12288 at 64
  std::string name() const { return "imagenet" + std::to_string(side); }
  std::string square() const { return std::to_string(side) + "x" + std::to_string(side); }
};
constexpr int kNpzTrainBatches = 10;
constexpr const char* kNpzMember = "data.npy";

std::vector<std::string> npz_names(OfficialSplit split) {
  if (split == OfficialSplit::kTest) return {"val_data.npz"};
  std::vector<std::string> names;
  for (int i = 1; i <= kNpzTrainBatches; ++i)
    names.push_back("train_data_batch_" + std::to_string(i) + ".npz");
  return names;
}

// Checks the data.npy header of an npz batch against what it must hold and against the size
// of the member (so no count is trusted before the bytes are known to be there); returns the
// image count.
int64_t npz_count(const util::NpyHeader& header,
                  uint64_t member_size,
                  const std::string& name,
                  const Side& s) {
  if (header.dtype != torch::kUInt8 || header.shape.size() != 2 || header.shape[1] != s.bytes())
    throw std::runtime_error(
        s.name() + ": '" + name + "' data.npy must be uint8 [N, " + std::to_string(s.bytes()) +
        "], found " + header.descr + " with " + std::to_string(header.shape.size()) +
        " dimensions" +
        (header.shape.size() == 2
             ? " [" + std::to_string(header.shape[0]) + ", " + std::to_string(header.shape[1]) + "]"
             : ""));
  // parse_npy_header bounds data_bytes() well below 2^63, so the sum cannot overflow.
  if (header.data_offset + header.data_bytes() != member_size)
    throw std::runtime_error(
        s.name() + ": '" + name + "' data.npy: its header says " + std::to_string(header.shape[0]) +
        " images, expected " + std::to_string(header.data_bytes()) + " data bytes, found " +
        std::to_string(member_size < header.data_offset ? 0 : member_size - header.data_offset));
  return header.shape[0];
}

// Image count of an npz batch, from the header of its data.npy alone.
int64_t npz_batch_count(const ZipArchive& archive, const Side& s) {
  const auto head = archive.read(kNpzMember, 4096);
  return npz_count(util::parse_npy_header(head.data(), head.size(), archive.name()),
                   archive.entry(kNpzMember).size,
                   archive.name(),
                   s);
}

// Decodes the batch into out, which has room for the count images its header holds.
void read_npz_into(const ZipArchive& archive, int64_t count, uint8_t* out, const Side& s) {
  const auto bytes = archive.read(kNpzMember);
  const util::NpyHeader header = util::parse_npy_header(bytes.data(), bytes.size(), archive.name());
  if (npz_count(header, bytes.size(), archive.name(), s) != count)
    throw std::runtime_error(s.name() + ": '" + archive.name() + "' data.npy changed while read");
  const uint8_t* data = bytes.data() + header.data_offset;
  for (int64_t n = 0; n < count; ++n)
    planar_to_interleaved(data + n * s.bytes(), s.pixels(), 3, out + n * s.bytes());
}

ImageSet read_npz(const ZipArchive& archive, const Side& s) {
  ImageSet set;
  set.shape = {s.side, s.side, 3};
  set.count = npz_batch_count(archive, s);
  set.pixels.resize(set.count * s.bytes());
  read_npz_into(archive, set.count, set.pixels.data(), s);
  return set;
}

std::vector<std::string> npz_paths(const std::string& dir, OfficialSplit split, const Side& s) {
  std::vector<std::string> paths;
  std::string missing;
  for (const auto& name : npz_names(split)) {
    paths.push_back((fs::path(dir) / name).string());
    if (!fs::exists(paths.back())) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty())
    throw std::runtime_error(s.name() + ": npz folder '" + dir + "' lacks " + missing);
  spdlog::warn(
      "{}: '{}' holds image-net.org's npz version (box-resized); its bits/dim are NOT "
      "comparable to published ImageNet-{} figures, which use van den Oord et al.'s version",
      s.name(),
      dir,
      s.side);
  return paths;
}

// The *.png files directly in folder, sorted by name.
std::vector<std::string> list_pngs(const std::string& folder, const Side& s) {
  std::error_code error;
  if (!fs::is_directory(folder, error))
    throw std::runtime_error(s.name() + ": folder '" + folder + "' does not exist" +
                             (error && error != std::errc::no_such_file_or_directory
                                  ? " or cannot be read: " + error.message()
                                  : ""));
  std::vector<std::string> files;
  fs::directory_iterator entries(folder, error);
  if (error)
    throw std::runtime_error(s.name() + ": cannot list folder '" + folder +
                             "': " + error.message());
  for (const auto& entry : entries)
    if (entry.is_regular_file() && entry.path().extension() == ".png")
      files.push_back(entry.path().filename().string());
  if (files.empty()) throw std::runtime_error(s.name() + ": no .png files in '" + folder + "'");
  std::sort(files.begin(), files.end());
  return files;
}

// Decodes files [begin, end) of folder into out, on every core; each to its own slot, so the
// order is the file order whatever the thread count.
void decode_pngs(const std::string& folder,
                 const std::vector<std::string>& files,
                 int64_t begin,
                 int64_t end,
                 uint8_t* out,
                 const Side& s) {
  // at::parallel_for rethrows the first exception a worker throws.
  at::parallel_for(begin, end, 64, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const std::string path = (fs::path(folder) / files[i]).string();
      const std::vector<uint8_t> bytes = read_file_bytes(path, s.name());
      decode_imagenet64_png(
          bytes.data(), bytes.size(), path, out + (i - begin) * s.bytes(), s.side);
    }
  });
}

}  // namespace

Imagenet64Format detect_imagenet64_format(const std::string& dir, int64_t side) {
  const Side s{side};
  if (fs::is_directory(fs::path(dir) / "train") || fs::is_directory(fs::path(dir) / "valid"))
    return Imagenet64Format::kPng;
  if (fs::exists(fs::path(dir) / "val_data.npz") ||
      fs::exists(fs::path(dir) / "train_data_batch_1.npz"))
    return Imagenet64Format::kNpz;
  throw std::runtime_error(
      s.name() + ": '" + dir + "' holds neither train/ and valid/ folders of " + s.square() +
      " PNGs (van den Oord et al. version) nor train_data_batch_1..10.npz and val_data.npz "
      "(image-net.org version); see data/README.md");
}

void decode_imagenet64_png(
    const uint8_t* data, size_t size, const std::string& name, uint8_t* out, int64_t side) {
  const Side s{side};
  // The header first: anything but side x side RGB is refused before a pixel is decoded, so a PNG
  // that claims to be huge costs nothing. util's messages start with the file's name; ours with
  // the dataset's.
  const auto prefixed = [&](auto&& read) {
    try {
      return read();
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(s.name() + ": " + e.what());
    }
  };
  const auto check = [&](int64_t width, int64_t height, int64_t channels) {
    if (width != s.side || height != s.side || channels != 3)
      throw std::runtime_error(s.name() + ": '" + name + "' is " + std::to_string(width) + "x" +
                               std::to_string(height) + " with " + std::to_string(channels) +
                               " channels, expected " + s.square() + " with 3 (RGB)");
  };
  const auto header = prefixed([&] { return util::read_image_header(data, size, name); });
  check(header.width, header.height, header.channels);
  const auto image = prefixed([&] { return util::decode_image_bytes(data, size, name); });
  check(image.width, image.height, image.channels);
  std::copy(image.pixels.begin(), image.pixels.end(), out);
}

ImageSet read_png_folder(const std::string& folder, int64_t side) {
  const Side s{side};
  const auto files = list_pngs(folder, s);
  if (files.size() > 1000)
    spdlog::info("{}: decoding {} PNGs from '{}'", s.name(), files.size(), folder);
  ImageSet set;
  set.shape = {s.side, s.side, 3};
  set.count = static_cast<int64_t>(files.size());
  set.pixels.resize(set.count * s.bytes());
  decode_pngs(folder, files, 0, set.count, set.pixels.data(), s);
  return set;
}

ImageSet read_imagenet64_npz(const std::string& path, int64_t side) {
  return read_npz(ZipArchive::open(path), Side{side});
}

ImageSet parse_imagenet64_npz(const uint8_t* data,
                              size_t size,
                              const std::string& name,
                              int64_t side) {
  return read_npz(ZipArchive::in_memory(data, size, name), Side{side});
}

// ---------------------------------------------------------------------------------------------
// Imagenet64Reader: one npz batch in memory at a time, or PNGs decoded a chunk at a time.

struct Imagenet64Reader::State {
  Side side;
  // png
  std::string folder;
  std::vector<std::string> files;
  // npz
  std::vector<ZipArchive> archives;
  std::vector<int64_t> counts;
  size_t next_archive = 0;
  std::vector<uint8_t> batch;  // the current npz batch, interleaved
  int64_t batch_count = 0, batch_used = 0;

  int64_t count = 0, done = 0;
};

Imagenet64Reader::Imagenet64Reader(const std::string& dir, OfficialSplit split, int64_t side)
    : state_(std::make_unique<State>()) {
  auto& s = *state_;
  s.side = Side{side};
  if (detect_imagenet64_format(dir, side) == Imagenet64Format::kNpz) {
    // Headers first, so the count is known before any image is decoded.
    for (const auto& path : npz_paths(dir, split, s.side)) {
      s.archives.push_back(ZipArchive::open(path));
      s.counts.push_back(npz_batch_count(s.archives.back(), s.side));
      s.count += s.counts.back();
    }
  } else {
    s.folder = (fs::path(dir) / (split == OfficialSplit::kTrain ? "train" : "valid")).string();
    s.files = list_pngs(s.folder, s.side);
    s.count = static_cast<int64_t>(s.files.size());
  }
}

Imagenet64Reader::~Imagenet64Reader() = default;

int64_t Imagenet64Reader::count() const {
  return state_->count;
}

int64_t Imagenet64Reader::read(uint8_t* out, int64_t n) {
  auto& s = *state_;
  const int64_t image_bytes = s.side.bytes();
  n = std::min(n, s.count - s.done);
  if (n <= 0) return 0;
  if (s.archives.empty()) {
    decode_pngs(s.folder, s.files, s.done, s.done + n, out, s.side);
  } else {
    for (int64_t copied = 0; copied < n;) {
      if (s.batch_used == s.batch_count && n - copied >= s.counts[s.next_archive]) {
        // A whole batch fits: straight into out, no copy (load_imagenet64's case).
        const size_t a = s.next_archive++;
        read_npz_into(s.archives[a], s.counts[a], out + copied * image_bytes, s.side);
        copied += s.counts[a];
        continue;
      }
      if (s.batch_used == s.batch_count) {
        const size_t a = s.next_archive++;
        s.batch_count = s.counts[a];
        s.batch_used = 0;
        s.batch.assign(static_cast<size_t>(s.batch_count * image_bytes), 0);
        read_npz_into(s.archives[a], s.batch_count, s.batch.data(), s.side);
      }
      const int64_t take = std::min(n - copied, s.batch_count - s.batch_used);
      std::copy_n(s.batch.data() + s.batch_used * image_bytes,
                  take * image_bytes,
                  out + copied * image_bytes);
      s.batch_used += take;
      copied += take;
    }
  }
  s.done += n;
  return n;
}

ImageSet load_imagenet64(const std::string& dir, OfficialSplit split, int64_t side) {
  const Side s{side};
  Imagenet64Reader reader(dir, split, side);
  if (reader.count() > 1000)
    spdlog::info("{}: decoding {} images from '{}'", s.name(), reader.count(), dir);
  ImageSet set;
  set.shape = {s.side, s.side, 3};
  set.count = reader.count();
  set.pixels.resize(set.count * s.bytes());
  reader.read(set.pixels.data(), set.count);
  return set;
}

}  // namespace combiner::data
