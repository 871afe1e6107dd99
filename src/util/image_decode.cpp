// The format is told by the signature, never by the file name; the size in the header is
// checked against the limits before a decoder allocates anything; channel conversions follow
// stb_image's (stbi__convert_format), so callers see the pixels they saw with stb.
#include "util/image_decode.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "util/image_decode_detail.h"

namespace combiner::util {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr uint8_t kJpegSignature[3] = {0xff, 0xd8, 0xff};

ImageFormat detect_format(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size >= sizeof kPngSignature && std::equal(kPngSignature, kPngSignature + 8, bytes))
    return ImageFormat::kPng;
  if (size >= sizeof kJpegSignature && std::equal(kJpegSignature, kJpegSignature + 3, bytes))
    return ImageFormat::kJpeg;
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, i ? " %02x" : "%02x", bytes[i]);
    start += hex;
  }
  throw std::runtime_error(name + ": not a PNG or JPEG image (" +
                           (size ? "starts with " + start : std::string("empty file")) +
                           "; expected 89 50 4e 47 0d 0a 1a 0a or ff d8 ff)");
}

uint8_t luma(uint8_t r, uint8_t g, uint8_t b) {  // stbi__compute_y
  return static_cast<uint8_t>((r * 77 + g * 150 + b * 29) >> 8);
}

}  // namespace

namespace detail {

void check_size(const ImageHeader& header, const std::string& name, const DecodeLimits& limits) {
  if (header.width > limits.max_side || header.height > limits.max_side)
    throw std::runtime_error(name + ": " + std::to_string(header.width) + " x " +
                             std::to_string(header.height) + " pixels, more than " +
                             std::to_string(limits.max_side) + " a side");
}

}  // namespace detail

void convert_channels(
    const uint8_t* in, int64_t n_in, uint8_t* out, int64_t n_out, int64_t pixel_count) {
  if (n_in < 1 || n_in > 4 || n_out < 1 || n_out > 4)
    throw std::invalid_argument("convert_channels: expected 1 to 4 channels, found " +
                                std::to_string(n_in) + " -> " + std::to_string(n_out));
  for (int64_t i = 0; i < pixel_count; ++i, in += n_in, out += n_out) {
    const bool colour = n_in >= 3, alpha = n_in == 2 || n_in == 4;
    const uint8_t a = alpha ? in[n_in - 1] : 255;
    if (n_out <= 2) {
      out[0] = colour ? luma(in[0], in[1], in[2]) : in[0];
    } else {
      out[0] = in[0];
      out[1] = colour ? in[1] : in[0];
      out[2] = colour ? in[2] : in[0];
    }
    if (n_out == 2 || n_out == 4) out[n_out - 1] = a;
  }
}

ImageHeader read_image_header(const uint8_t* bytes, size_t size, const std::string& name) {
  return detect_format(bytes, size, name) == ImageFormat::kPng
             ? detail::read_png_header(bytes, size, name)
             : detail::read_jpeg_header(bytes, size, name);
}

DecodedImage decode_image_bytes(const uint8_t* bytes,
                                size_t size,
                                const std::string& name,
                                int64_t channels,
                                const DecodeLimits& limits) {
  if (channels < 0 || channels > 4)
    throw std::invalid_argument(name + ": asked for " + std::to_string(channels) +
                                " channels, expected 1 to 4 (or 0: the file's own)");
  DecodedImage image;
  if (detect_format(bytes, size, name) == ImageFormat::kPng) {
    const ImageHeader header = detail::read_png_header(bytes, size, name);
    detail::check_size(header, name, limits);
    image = detail::decode_png(bytes, size, name, header, limits, channels == 1 || channels == 2);
  } else {
    image = detail::decode_jpeg(bytes, size, name, limits, channels == 1 || channels == 2);
  }
  if (channels == 0 || channels == image.channels) return image;
  DecodedImage converted{image.width, image.height, channels, {}};
  converted.pixels.resize(static_cast<size_t>(image.width * image.height * channels));
  convert_channels(image.pixels.data(),
                   image.channels,
                   converted.pixels.data(),
                   channels,
                   image.width * image.height);
  return converted;
}

}  // namespace combiner::util
