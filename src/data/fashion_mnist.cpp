// idx3 reading through zlib's gz* interface, which reads gzipped and plain files alike, in
// chunks of up to 64 MiB straight into the ImageSet's pixel buffer.
#include "data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace combiner::data {
namespace {

constexpr uint32_t kIdx3Magic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr int64_t kSide = 28;

struct GzCloser {
  void operator()(gzFile_s* file) const { gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to size bytes; fewer only at the end of the data. Throws on a corrupt stream.
int64_t read_fully(gzFile file, uint8_t* out, int64_t size, const std::string& path) {
  int64_t done = 0;
  while (done < size) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(size - done, 64 << 20));
    const int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int code = 0;
      throw std::runtime_error("fashion_mnist: '" + path + "' is corrupt: " + gzerror(file, &code));
    }
    if (got == 0) break;
    done += got;
  }
  // gzread reports a stream cut short inside the deflate data as an error after the fact.
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  if (code != Z_OK && code != Z_STREAM_END)
    throw std::runtime_error("fashion_mnist: '" + path + "' is corrupt: " + message);
  return done;
}

uint32_t big_endian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

ImageSet read_idx_images(const std::string& path) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) throw std::runtime_error("fashion_mnist: cannot open '" + path + "'");
  gzbuffer(file.get(), 1 << 20);

  uint8_t header[16];
  const int64_t got = read_fully(file.get(), header, 16, path);
  if (got != 16)
    throw std::runtime_error("fashion_mnist: '" + path + "' is too short for an idx3 header: " +
                             "expected 16 bytes, found " + std::to_string(got));
  const uint32_t magic = big_endian(header);
  if (magic != kIdx3Magic)
    throw std::runtime_error("fashion_mnist: '" + path + "' is not an idx3 image file: expected " +
                             "magic 2051, found " + std::to_string(magic));
  const int64_t count = big_endian(header + 4);
  const int64_t rows = big_endian(header + 8);
  const int64_t cols = big_endian(header + 12);
  if (rows != kSide || cols != kSide)
    throw std::runtime_error("fashion_mnist: '" + path + "' holds " + std::to_string(rows) + "x" +
                             std::to_string(cols) + " images, expected 28x28");

  ImageSet set;
  set.shape = {kSide, kSide, 1};
  set.count = count;
  const int64_t expected = count * set.shape.length();
  set.pixels.resize(expected);
  int64_t found = read_fully(file.get(), set.pixels.data(), expected, path);
  // Count what is left too, so an oversized file reports its real size.
  std::vector<uint8_t> rest(1 << 16);
  for (int64_t extra = 1; extra > 0;) {
    extra = read_fully(file.get(), rest.data(), static_cast<int64_t>(rest.size()), path);
    found += extra;
  }
  if (found != expected)
    throw std::runtime_error("fashion_mnist: '" + path + "' header says " + std::to_string(count) +
                             " images of 784 bytes: expected " + std::to_string(expected) +
                             " bytes after the header, found " + std::to_string(found));
  return set;
}

ImageSet load_fashion_mnist(const std::string& dir, OfficialSplit split) {
  const std::string stem =
      split == OfficialSplit::kTrain ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
  for (const std::string& name : {stem + ".gz", stem}) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    if (std::filesystem::exists(path)) return read_idx_images(path.string());
  }
  throw std::runtime_error("fashion_mnist: neither '" + stem + ".gz' nor '" + stem + "' in '" +
                           dir + "'");
}

}  // namespace combiner::data
