// The two format decoders behind util/image_decode.h, each on its own file: they decode to the
// file's own channels (ImageHeader::channels; a YCbCr JPEG to its luma alone when asked), and
// image_decode.cpp checks limits and converts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "util/image_decode.h"

namespace combiner::util::detail {

// The PNG header from the IHDR chunk alone (its CRC is libpng's to check when decoding).
ImageHeader read_png_header(const uint8_t* bytes, size_t size, const std::string& name);
// header: read_png_header's, already checked against limits. luma: grey is wanted, so 16-bit
// RGB(A) files decode to grey (+ alpha) as stb_image computed it, from the 16-bit samples.
DecodedImage decode_png(const uint8_t* bytes,
                        size_t size,
                        const std::string& name,
                        const ImageHeader& header,
                        const DecodeLimits& limits,
                        bool luma);

// luma_only: a YCbCr JPEG decodes to its Y channel alone (1 channel), as stb_image does for
// grey output; other JPEGs decode to the header's channels. The size is checked against the
// limits between reading the header and decoding.
ImageHeader read_jpeg_header(const uint8_t* bytes, size_t size, const std::string& name);
DecodedImage decode_jpeg(const uint8_t* bytes,
                         size_t size,
                         const std::string& name,
                         const DecodeLimits& limits,
                         bool luma_only);

// "<name>: W x H pixels, more than N a side" when the header exceeds the limits.
void check_size(const ImageHeader& header, const std::string& name, const DecodeLimits& limits);

}  // namespace combiner::util::detail
