// Images as subpixel sequences, the one in-memory form every dataset reader produces.
// Sequence order: raster order over pixels, the channels of a pixel consecutive (R,G,B), so an
// image of H x W x C is a sequence of L = H*W*C values in [0, 255].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace combiner::data {

struct ImageShape {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  int64_t length() const { return height * width * channels; }  // L
  bool operator==(const ImageShape& o) const {
    return height == o.height && width == o.width && channels == o.channels;
  }
};

// Where a set's images live when they are not in ImageSet::pixels: a memory-mapped packed file
// (data/packed.h), shared by every set sliced from it and by every process that maps it.
class ImageStorage {
 public:
  virtual ~ImageStorage() = default;
  virtual const uint8_t* images() const = 0;  // image 0 of the file
  // Throws std::runtime_error if the storage failed its integrity check (a payload checksum);
  // with wait, blocks until the check has finished, else returns if it is still running.
  virtual void check_integrity(bool wait) const = 0;
};

struct ImageSet {
  ImageShape shape;
  int64_t count = 0;
  int64_t bits = 8;             // subpixels are below 2^bits (an `images` pack's --bits)
  std::vector<uint8_t> pixels;  // in memory: count * L values, image n at n * L; or empty and
  std::shared_ptr<const ImageStorage> storage;  // mapped: images first .. first + count of it
  int64_t first = 0;

  const uint8_t* data() const {
    return storage ? storage->images() + first * shape.length() : pixels.data();
  }
  const uint8_t* image(int64_t n) const { return data() + n * shape.length(); }
  void check_integrity(bool wait) const {
    if (storage) storage->check_integrity(wait);
  }
};

enum class Split { kTrain, kVal, kTest };
const char* split_name(Split split);
Split parse_split(const std::string& name);  // "train" | "val" | "test", else invalid_argument

// The two sets a dataset is published with; load_split carves val out of the end of kTrain.
enum class OfficialSplit { kTrain, kTest };

}  // namespace combiner::data
