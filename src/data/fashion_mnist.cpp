// idx3 reading from memory: a file is read whole (26 MB for the gzipped training set) and, if it
// starts with the gzip magic, inflated with zlib (concatenated members too, as gzip writes
// them); plain files are parsed as they are. Pixels are inflated straight into the ImageSet,
// which grows only as far as the data really goes, so a header claiming billions of images
// costs nothing before the sizes are compared.
#include "data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "data/file_bytes.h"

namespace combiner::data {
namespace {

constexpr uint32_t kIdx3Magic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr int64_t kSide = 28;
constexpr int64_t kHeaderBytes = 16;

uint32_t big_endian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Where the decoded bytes of an idx file go: the 16-byte header, then up to `limit` pixel
// bytes (0 until the header is parsed); bytes beyond are only counted.
class IdxSink {
 public:
  void put(const uint8_t* data, size_t n) {
    while (n > 0) {
      size_t take = 0;
      if (header_.size() < kHeaderBytes) {
        take = std::min<size_t>(n, kHeaderBytes - header_.size());
        header_.insert(header_.end(), data, data + take);
      } else if (static_cast<int64_t>(pixels_.size()) < limit_) {
        take = std::min<size_t>(n, static_cast<size_t>(limit_ - pixels_.size()));
        pixels_.insert(pixels_.end(), data, data + take);
      } else {
        take = n;
        extra_ += static_cast<int64_t>(n);
      }
      data += take;
      n -= take;
    }
  }
  void set_limit(int64_t limit) { limit_ = limit; }
  const std::vector<uint8_t>& header() const { return header_; }
  std::vector<uint8_t>& pixels() { return pixels_; }
  int64_t found() const { return static_cast<int64_t>(pixels_.size()) + extra_; }

 private:
  std::vector<uint8_t> header_;
  std::vector<uint8_t> pixels_;
  int64_t limit_ = 0;
  int64_t extra_ = 0;
};

// The header: checked as soon as its 16 bytes are in, so the pixel limit is known before any
// pixel is stored. Returns the image count.
int64_t check_header(const std::vector<uint8_t>& header, const std::string& name) {
  if (header.size() != kHeaderBytes)
    throw std::runtime_error("fashion_mnist: '" + name + "' is too short for an idx3 header: " +
                             "expected 16 bytes, found " + std::to_string(header.size()));
  const uint32_t magic = big_endian(header.data());
  if (magic != kIdx3Magic)
    throw std::runtime_error("fashion_mnist: '" + name + "' is not an idx3 image file: expected " +
                             "magic 2051, found " + std::to_string(magic));
  const int64_t rows = big_endian(header.data() + 8);
  const int64_t cols = big_endian(header.data() + 12);
  if (rows != kSide || cols != kSide)
    throw std::runtime_error("fashion_mnist: '" + name + "' holds " + std::to_string(rows) + "x" +
                             std::to_string(cols) + " images, expected 28x28");
  return big_endian(header.data() + 4);
}

// Feeds data to sink, checking the header once it is complete.
void feed(IdxSink& sink, const uint8_t* data, size_t n, const std::string& name) {
  const bool had_header = sink.header().size() == kHeaderBytes;
  const size_t header_part =
      had_header ? 0 : std::min<size_t>(n, kHeaderBytes - sink.header().size());
  sink.put(data, header_part);
  if (!had_header && sink.header().size() == kHeaderBytes)
    sink.set_limit(check_header(sink.header(), name) * kSide * kSide);
  sink.put(data + header_part, n - header_part);
}

[[noreturn]] void corrupt(const std::string& name, const std::string& what) {
  throw std::runtime_error("fashion_mnist: '" + name + "' is corrupt: " + what);
}

// Inflates every gzip member in data into sink.
void gunzip(const uint8_t* data, size_t size, IdxSink& sink, const std::string& name) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) corrupt(name, "inflateInit2 failed");
  std::vector<uint8_t> out(1 << 20);
  size_t given = 0;  // bytes handed to zlib so far; given - z.avail_in are consumed
  std::string problem;
  for (;;) {
    if (z.avail_in == 0 && given < size) {
      const size_t n = std::min<size_t>(size - given, 1u << 30);
      z.next_in = const_cast<uint8_t*>(data + given);
      z.avail_in = static_cast<uInt>(n);
      given += n;
    }
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    const int status = inflate(&z, Z_NO_FLUSH);
    try {
      feed(sink, out.data(), out.size() - z.avail_out, name);
    } catch (...) {
      inflateEnd(&z);
      throw;
    }
    const size_t consumed = given - z.avail_in;
    if (status == Z_STREAM_END) {
      if (consumed == size) break;
      // Another member may follow (gzip concatenates them); anything else is not gzip data.
      if (size - consumed < 2 || data[consumed] != 0x1f || data[consumed + 1] != 0x8b) {
        problem = std::to_string(size - consumed) + " bytes of garbage after the gzip data";
        break;
      }
      inflateReset(&z);
    } else if (status == Z_BUF_ERROR) {
      // No progress with room to write: the input ran out inside a member.
      problem = "unexpected end of the gzip data (truncated file?)";
      break;
    } else if (status != Z_OK) {
      problem = z.msg ? z.msg : "zlib error " + std::to_string(status);
      break;
    }
  }
  inflateEnd(&z);
  if (!problem.empty()) corrupt(name, problem);
}

}  // namespace

ImageSet parse_idx_images(const uint8_t* data, size_t size, const std::string& name) {
  IdxSink sink;
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b)
    gunzip(data, size, sink, name);
  else
    feed(sink, data, size, name);
  const int64_t count = check_header(sink.header(), name);
  const int64_t expected = count * kSide * kSide;
  if (sink.found() != expected)
    throw std::runtime_error("fashion_mnist: '" + name + "' header says " + std::to_string(count) +
                             " images of 784 bytes: expected " + std::to_string(expected) +
                             " bytes after the header, found " + std::to_string(sink.found()));
  ImageSet set;
  set.shape = {kSide, kSide, 1};
  set.count = count;
  set.pixels = std::move(sink.pixels());
  return set;
}

ImageSet read_idx_images(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path, "fashion_mnist");
  return parse_idx_images(bytes.data(), bytes.size(), path);
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
