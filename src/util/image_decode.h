// PNG and JPEG files to pixels, for every reader of images from outside (combiner-data pack
// --from, the ImageNet PNG folders): libpng and libjpeg-turbo, the decoders Pillow and
// torchvision use, fuzzed continuously upstream. The size in the header is checked against the
// limits before any pixel buffer is allocated; channel conversions are stb_image's, so PNG
// pixels are exactly what stb_image gave. stb is used only for writing and resizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace combiner::util {

enum class ImageFormat { kPng, kJpeg };

// What the header says. channels: what decoding with channels 0 gives, 1 grey, 2 grey + alpha,
// 3 RGB, 4 RGBA (a PNG's colour type: palette images are RGB; JPEG: 1 grey, else 3, CMYK too).
struct ImageHeader {
  ImageFormat format = ImageFormat::kPng;
  int64_t width = 0, height = 0, channels = 0;
};

struct DecodeLimits {
  int64_t max_side = 16384;  // pixels a side; a larger image is refused before decoding
  // The JPEG decoder's own working memory (a progressive file's coefficients: 2 bytes per
  // sample, 1.5 GiB at 16384 x 16384 RGB without subsampling).
  int64_t max_jpeg_memory = int64_t{1} << 30;
  int max_jpeg_scans = 500;  // progressive scans (libjpeg-turbo's advice against scan floods)
};

// [height, width, channels] row-major uint8.
struct DecodedImage {
  int64_t width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// The format (from the signature, not the name), size and channels, from the header alone.
// std::runtime_error "<name>: <what is wrong>" for anything but a PNG or JPEG header.
ImageHeader read_image_header(const uint8_t* bytes, size_t size, const std::string& name);

// The whole image with `channels` channels (1 to 4, stb_image's conversions: grey = (77 R +
// 150 G + 29 B) >> 8, a YCbCr JPEG's luma as stored, alpha dropped or set to 255), or the file's
// own with 0. 16-bit PNG samples keep their high byte, palettes and low bit depths are expanded,
// tRNS transparency is ignored; Adobe CMYK/YCCK JPEGs become RGB as stb_image made them.
// std::runtime_error "<name>: ..." for a file that is not a complete, valid PNG or JPEG (a
// corrupt or truncated JPEG scan too, which libjpeg would otherwise fill in) or that exceeds
// the limits; std::invalid_argument for channels outside 0..4.
DecodedImage decode_image_bytes(const uint8_t* bytes,
                                size_t size,
                                const std::string& name,
                                int64_t channels = 0,
                                const DecodeLimits& limits = {});

// Converts n_in-channel pixels to n_out channels (1 to 4 each) as stb_image does.
void convert_channels(
    const uint8_t* in, int64_t n_in, uint8_t* out, int64_t n_out, int64_t pixel_count);

}  // namespace combiner::util
