// Small PNG and JPEG files in memory, written with libpng and libjpeg-turbo in the layouts the
// decoders must read (bit depths, palettes, interlacing, progressive and CMYK JPEG), for the
// decoder's tests and the fuzz seeds (fuzz/make_seeds.cpp). Each writer returns an empty vector
// if the library refused the request.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <cstdlib>
#include <vector>

#include <jpeglib.h>
#include <png.h>

namespace combiner::testing {

struct PngLayout {
  int width = 1, height = 1;
  int colour_type = PNG_COLOR_TYPE_RGB;  // PNG_COLOR_TYPE_*
  int bit_depth = 8;                     // 1, 2, 4, 8 or 16, as the colour type allows
  bool interlaced = false;               // Adam7
  std::vector<png_color> palette;        // for PNG_COLOR_TYPE_PALETTE
  std::vector<png_byte> transparency;    // a tRNS chunk for the palette's first entries
  bool check_palette_indexes = true;     // false: indexes past the palette are written as given
};

namespace detail {

inline void append_png(png_structp png, png_bytep data, size_t n) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}

// No C++ object lives in this frame: libpng's errors longjmp here.
inline bool write_png(png_structp png,
                      png_infop info,
                      const PngLayout* layout,
                      png_bytepp rows,
                      std::vector<uint8_t>* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_write_fn(png, out, append_png, nullptr);
  png_set_IHDR(png,
               info,
               layout->width,
               layout->height,
               layout->bit_depth,
               layout->colour_type,
               layout->interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!layout->palette.empty())
    png_set_PLTE(png, info, layout->palette.data(), static_cast<int>(layout->palette.size()));
  if (!layout->transparency.empty())
    png_set_tRNS(png,
                 info,
                 layout->transparency.data(),
                 static_cast<int>(layout->transparency.size()),
                 nullptr);
  if (!layout->check_palette_indexes) png_set_check_for_invalid_index(png, 0);
  png_write_info(png, info);
  if (layout->bit_depth == 16) png_set_swap(png);  // rows hold native-endian uint16
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  return true;
}

}  // namespace detail

// samples: the rows' samples in file order, one value per sample (for bit depths below 8, the
// value before packing), height * width * channels of the colour type.
inline std::vector<uint8_t> png_file(const PngLayout& layout,
                                     const std::vector<uint16_t>& samples) {
  static const int kChannels[7] = {1, 0, 3, 1, 2, 0, 4};
  const int channels = kChannels[layout.colour_type];
  const size_t per_row = static_cast<size_t>(layout.width) * channels;
  // Packed rows: 16-bit samples as uint16, 8-bit as bytes, fewer bits packed high bit first.
  std::vector<std::vector<uint8_t>> packed(layout.height);
  for (int y = 0; y < layout.height; ++y) {
    auto& row = packed[y];
    const uint16_t* s = samples.data() + y * per_row;
    if (layout.bit_depth == 16) {
      row.resize(per_row * 2);
      for (size_t i = 0; i < per_row; ++i)
        reinterpret_cast<uint16_t*>(row.data())[i] = s[i];  // NOLINT: bytes of a uint16 array
    } else {
      const int d = layout.bit_depth, per_byte = 8 / d;
      row.assign((per_row + per_byte - 1) / per_byte, 0);
      for (size_t i = 0; i < per_row; ++i)
        row[i / per_byte] |= static_cast<uint8_t>(s[i] << (8 - d * (1 + int(i % per_byte))));
    }
  }
  std::vector<png_bytep> rows;
  for (auto& row : packed) rows.push_back(row.data());
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  const bool ok = info && detail::write_png(png, info, &layout, rows.data(), &out);
  png_destroy_write_struct(&png, &info);
  return ok ? out : std::vector<uint8_t>{};
}

struct JpegLayout {
  int width = 1, height = 1;
  J_COLOR_SPACE in_space = JCS_RGB;  // JCS_GRAYSCALE, JCS_RGB or JCS_CMYK samples
  J_COLOR_SPACE file_space =
      JCS_YCbCr;  // stored as: JCS_GRAYSCALE, JCS_YCbCr, JCS_RGB, JCS_CMYK, JCS_YCCK
  int quality = 90;
  bool progressive = false;
};

namespace detail {

struct JpegWrite {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr errors{};
  std::jmp_buf jump{};
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
};

[[noreturn]] inline void jpeg_write_failed(j_common_ptr cinfo) {
  std::longjmp(static_cast<JpegWrite*>(cinfo->client_data)->jump, 1);
}

inline bool write_jpeg(JpegWrite* w, const JpegLayout* layout, const uint8_t* samples) {
  w->cinfo.err = jpeg_std_error(&w->errors);
  w->errors.error_exit = jpeg_write_failed;
  w->cinfo.client_data = w;
  if (setjmp(w->jump)) return false;
  jpeg_create_compress(&w->cinfo);
  jpeg_mem_dest(&w->cinfo, &w->buffer, &w->size);
  w->cinfo.image_width = static_cast<JDIMENSION>(layout->width);
  w->cinfo.image_height = static_cast<JDIMENSION>(layout->height);
  w->cinfo.in_color_space = layout->in_space;
  w->cinfo.input_components = layout->in_space == JCS_GRAYSCALE ? 1
                              : layout->in_space == JCS_CMYK    ? 4
                                                                : 3;
  jpeg_set_defaults(&w->cinfo);
  jpeg_set_colorspace(&w->cinfo, layout->file_space);
  jpeg_set_quality(&w->cinfo, layout->quality, TRUE);
  if (layout->progressive) jpeg_simple_progression(&w->cinfo);
  jpeg_start_compress(&w->cinfo, TRUE);
  const size_t row_bytes = static_cast<size_t>(layout->width) * w->cinfo.input_components;
  while (w->cinfo.next_scanline < w->cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(samples) + w->cinfo.next_scanline * row_bytes;
    jpeg_write_scanlines(&w->cinfo, &row, 1);
  }
  jpeg_finish_compress(&w->cinfo);
  return true;
}

}  // namespace detail

// samples: height * width * (1, 3 or 4 for in_space) bytes.
inline std::vector<uint8_t> jpeg_file(const JpegLayout& layout,
                                      const std::vector<uint8_t>& samples) {
  detail::JpegWrite w;
  const bool ok = detail::write_jpeg(&w, &layout, samples.data());
  std::vector<uint8_t> out;
  if (ok) out.assign(w.buffer, w.buffer + w.size);
  jpeg_destroy_compress(&w.cinfo);
  std::free(w.buffer);
  return out;
}

}  // namespace combiner::testing
