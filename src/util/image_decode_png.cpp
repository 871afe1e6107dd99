// PNG through libpng. libpng reports errors by longjmp to png_jmpbuf: every libpng call sits in
// one of two small functions (read_info, read_pixels) that set the jump point and hold no C++
// object, so the jump unwinds only libpng's C frames; the buffers they fill are allocated by the
// caller between the two. Only IHDR, PLTE, tRNS, IDAT and IEND are read: every ancillary chunk
// (text, ICC profiles, ...) is skipped unparsed, as nothing here uses it.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "util/image_decode_detail.h"

namespace combiner::util::detail {
namespace {

// Everything the callbacks and the two stages share: plain data only.
struct PngRead {
  const uint8_t* bytes = nullptr;
  size_t size = 0, offset = 0;
  char error[256] = "";
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, colour_type = 0, channels = 0;
  size_t row_bytes = 0;
  bool luma = false;  // in: grey output wanted; out: kept 16-bit colour samples for it
};

void on_error(png_structp png, png_const_charp message) {
  auto* read = static_cast<PngRead*>(png_get_error_ptr(png));
  std::snprintf(read->error, sizeof read->error, "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a bad ancillary CRC, an unusual but legal layout) leave the pixels intact.
void on_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* read = static_cast<PngRead*>(png_get_io_ptr(png));
  if (n > read->size - read->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, read->bytes + read->offset, n);
  read->offset += n;
}

// libpng's structs, destroyed however decoding ends.
struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Header and transformations: samples become 8-bit (16-bit ones keep their high byte, as
// stb_image's did), grey of 1, 2 or 4 bits 8-bit grey (scaled to 0..255), palette indexes one
// byte each (expanded by expand_palette, which checks them). 16-bit colour stays 16-bit when
// grey is wanted: stb_image took the luma before dropping the low byte.
bool read_info(png_structp png, png_infop info, PngRead* read, png_uint_32 max_side) {
  static constexpr png_byte kTrns[5] = "tRNS";
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, read, read_bytes);
  png_set_user_limits(png, max_side, max_side);
  png_set_chunk_malloc_max(png, 8 << 20);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, kTrns, 1);  // no alpha from tRNS
  png_read_info(png, info);
  png_get_IHDR(png,
               info,
               &read->width,
               &read->height,
               &read->bit_depth,
               &read->colour_type,
               nullptr,
               nullptr,
               nullptr);
  read->luma = read->luma && read->bit_depth == 16 && (read->colour_type & PNG_COLOR_MASK_COLOR);
  if (!read->luma) png_set_strip_16(png);
  if (read->colour_type == PNG_COLOR_TYPE_PALETTE) png_set_packing(png);
  if (read->colour_type == PNG_COLOR_TYPE_GRAY && read->bit_depth < 8)
    png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  read->channels = png_get_channels(png, info);
  read->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool read_pixels(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

// stb_image's grey from 16-bit RGB or RGBA (big-endian samples): the luma of the 16-bit
// samples, then its high byte; alpha's high byte.
DecodedImage luma_from_16(const std::vector<uint8_t>& wide, int64_t w, int64_t h, int channels) {
  const int n = channels == 4 ? 2 : 1;
  DecodedImage image{w, h, n, std::vector<uint8_t>(static_cast<size_t>(w * h * n))};
  for (size_t i = 0; i < static_cast<size_t>(w * h); ++i) {
    const uint8_t* p = wide.data() + i * channels * 2;
    const auto sample = [p](int c) { return p[2 * c] << 8 | p[2 * c + 1]; };
    image.pixels[i * n] =
        static_cast<uint8_t>(((sample(0) * 77 + sample(1) * 150 + sample(2) * 29) >> 8) >> 8);
    if (n == 2) image.pixels[i * n + 1] = p[6];
  }
  return image;
}

// Palette indexes to RGB. libpng would draw an index past the palette's end black; such a file
// is damaged, and refused.
std::vector<uint8_t> expand_palette(png_structp png,
                                    png_infop info,
                                    const std::vector<uint8_t>& indexes,
                                    const std::string& name) {
  png_colorp palette = nullptr;
  int colours = 0;
  png_get_PLTE(png, info, &palette, &colours);
  std::vector<uint8_t> rgb(indexes.size() * 3);
  for (size_t i = 0; i < indexes.size(); ++i) {
    if (indexes[i] >= colours)
      throw std::runtime_error(name + ": cannot decode PNG (palette index " +
                               std::to_string(indexes[i]) + " in a palette of " +
                               std::to_string(colours) + " colours)");
    const png_color& c = palette[indexes[i]];
    rgb[i * 3] = c.red, rgb[i * 3 + 1] = c.green, rgb[i * 3 + 2] = c.blue;
  }
  return rgb;
}

}  // namespace

ImageHeader read_png_header(const uint8_t* bytes, size_t size, const std::string& name) {
  // Signature (8 bytes), then the IHDR chunk: length 13, "IHDR", width, height (big-endian),
  // bit depth, colour type.
  const auto be32 = [&](size_t at) {
    return int64_t{bytes[at]} << 24 | int64_t{bytes[at + 1]} << 16 | int64_t{bytes[at + 2]} << 8 |
           int64_t{bytes[at + 3]};
  };
  if (size < 26 || be32(8) != 13 || std::memcmp(bytes + 12, "IHDR", 4) != 0)
    throw std::runtime_error(name +
                             ": not a valid PNG (expected its IHDR chunk after the "
                             "signature)");
  ImageHeader header{ImageFormat::kPng, be32(16), be32(20), 0};
  switch (bytes[25]) {
    case PNG_COLOR_TYPE_GRAY:
      header.channels = 1;
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      header.channels = 2;
      break;
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_PALETTE:
      header.channels = 3;
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      header.channels = 4;
      break;
    default:
      throw std::runtime_error(name + ": not a valid PNG (colour type " +
                               std::to_string(bytes[25]) + ", expected 0, 2, 3, 4 or 6)");
  }
  if (header.width < 1 || header.height < 1 || header.width > PNG_UINT_31_MAX ||
      header.height > PNG_UINT_31_MAX)
    throw std::runtime_error(name + ": not a valid PNG (IHDR says " + std::to_string(header.width) +
                             " x " + std::to_string(header.height) + " pixels)");
  return header;
}

DecodedImage decode_png(const uint8_t* bytes,
                        size_t size,
                        const std::string& name,
                        const ImageHeader& header,
                        const DecodeLimits& limits,
                        bool luma) {
  PngRead read;
  read.bytes = bytes;
  read.size = size;
  read.luma = luma;
  PngHandles handles;
  handles.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &read, on_error, on_warning);
  if (handles.png) handles.info = png_create_info_struct(handles.png);
  if (!handles.info) throw std::runtime_error(name + ": cannot decode PNG (out of memory)");
  const auto refuse = [&] {
    return std::runtime_error(name + ": cannot decode PNG (" + read.error + ")");
  };
  if (!read_info(handles.png, handles.info, &read, static_cast<png_uint_32>(limits.max_side)))
    throw refuse();
  // libpng has checked the IHDR that read_png_header only looked at; they must agree.
  const bool indexed = read.colour_type == PNG_COLOR_TYPE_PALETTE;
  const int file_channels = indexed ? 1 : int(header.channels);
  if (read.width != header.width || read.height != header.height ||
      read.channels != file_channels ||
      read.row_bytes != read.width * size_t(file_channels) * (read.luma ? 2 : 1))
    throw std::runtime_error(name + ": cannot decode PNG (an inconsistent IHDR chunk)");
  DecodedImage image{header.width, header.height, header.channels, {}};
  image.pixels.resize(read.row_bytes * read.height);
  std::vector<png_bytep> rows(read.height);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = image.pixels.data() + y * read.row_bytes;
  if (!read_pixels(handles.png, rows.data())) throw refuse();
  if (indexed) image.pixels = expand_palette(handles.png, handles.info, image.pixels, name);
  return read.luma ? luma_from_16(image.pixels, image.width, image.height, read.channels) : image;
}

}  // namespace combiner::util::detail
