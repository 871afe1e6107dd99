// Images as subpixel sequences, the one in-memory form every dataset reader produces.
// Sequence order: raster order over pixels, the channels of a pixel consecutive (R,G,B), so an
// image of H x W x C is a sequence of L = H*W*C values in [0, 255].
#pragma once

#include <cstdint>
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

struct ImageSet {
  ImageShape shape;
  int64_t count = 0;
  std::vector<uint8_t> pixels;  // count * shape.length() values, image n at n * L
  const uint8_t* image(int64_t n) const { return pixels.data() + n * shape.length(); }
};

enum class Split { kTrain, kVal, kTest };
const char* split_name(Split split);
Split parse_split(const std::string& name);  // "train" | "val" | "test", else invalid_argument

// The two sets a dataset is published with; load_split carves val out of the end of kTrain.
enum class OfficialSplit { kTrain, kTest };

}  // namespace combiner::data
