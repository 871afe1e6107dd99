// JPEG through libjpeg-turbo. libjpeg reports errors through error_exit, which must not return:
// ours formats the message and longjmps back into the stage that called libjpeg (read_header or
// read_pixels), functions that hold no C++ object, so the jump unwinds only libjpeg's C frames.
// Warnings that mean corrupt or missing scan data (which libjpeg fills in and carries on) are
// errors here: a damaged file is refused rather than packed with made-up pixels.
#include <csetjmp>
#include <cstddef>
#include <cstdio>  // before jpeglib.h, which needs FILE and size_t
#include <stdexcept>
#include <vector>

#include <jpeglib.h>

#include <jerror.h>  // after jpeglib.h

#include "util/image_decode_detail.h"

namespace combiner::util::detail {
namespace {

// Everything libjpeg and the stages share: plain data only. cinfo.client_data points here.
struct JpegRead {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr errors{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  char error[JMSG_LENGTH_MAX] = "";
  int max_scans = DecodeLimits{}.max_jpeg_scans;
};

JpegRead* state(j_common_ptr cinfo) {
  return static_cast<JpegRead*>(cinfo->client_data);
}

[[noreturn]] void on_error(j_common_ptr cinfo) {
  JpegRead* read = state(cinfo);
  if (cinfo->err->msg_code == JERR_NO_BACKING_STORE)  // what libjpeg says past max_memory_to_use
    std::snprintf(read->error,
                  sizeof read->error,
                  "needs more than the limit of %ld MiB of decoder memory",
                  cinfo->mem->max_memory_to_use >> 20);
  else
    (*cinfo->err->format_message)(cinfo, read->error);
  std::longjmp(read->jump, 1);
}

// Level -1 is a warning; higher levels are trace messages, never shown.
void on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  switch (cinfo->err->msg_code) {
    case JWRN_ADOBE_XFORM:      // an unknown transform code: decoded as the colour space says
    case JWRN_EXTRANEOUS_DATA:  // stray bytes before a marker, common in camera files
    case JWRN_JFIF_MAJOR:       // a newer JFIF version number
    case JWRN_BOGUS_ICC:        // a damaged ICC profile, which nothing here reads
      return;
    default:  // corrupt or missing entropy-coded data, an inconsistent progression
      on_error(cinfo);
  }
}

// Called as libjpeg works through the file: a progressive file of thousands of tiny scans is
// refused before it costs minutes (libjpeg-turbo's advice for untrusted input).
void on_progress(j_common_ptr cinfo) {
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > state(cinfo)->max_scans) {
    std::snprintf(state(cinfo)->error,
                  sizeof state(cinfo)->error,
                  "more than %d progressive scans",
                  state(cinfo)->max_scans);
    std::longjmp(state(cinfo)->jump, 1);
  }
}

// jpeg_destroy_decompress is safe on the zeroed struct too, however far read_header came.
struct JpegHandle {
  JpegRead read;
  ~JpegHandle() { jpeg_destroy_decompress(&read.cinfo); }
};

bool read_header(JpegRead* read, const uint8_t* bytes, size_t size, long max_memory) {
  read->cinfo.err = jpeg_std_error(&read->errors);
  read->errors.error_exit = on_error;
  read->errors.emit_message = on_message;
  read->cinfo.client_data = read;
  if (setjmp(read->jump)) return false;
  jpeg_create_decompress(&read->cinfo);  // keeps err and client_data
  read->cinfo.mem->max_memory_to_use = max_memory;
  read->progress.progress_monitor = on_progress;
  read->cinfo.progress = &read->progress;
  jpeg_mem_src(&read->cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&read->cinfo, TRUE);
  return true;
}

// Decodes into out, height rows of row_bytes each; false with read->error set on any error.
bool read_pixels(JpegRead* read, uint8_t* out, size_t row_bytes) {
  if (setjmp(read->jump)) return false;
  jpeg_start_decompress(&read->cinfo);
  if (read->cinfo.output_width * size_t(read->cinfo.output_components) != row_bytes) {
    std::snprintf(read->error, sizeof read->error, "an unexpected output size");
    return false;
  }
  while (read->cinfo.output_scanline < read->cinfo.output_height) {
    JSAMPROW row = out + read->cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&read->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&read->cinfo);
  return true;
}

// The colour space libjpeg should produce and its channel count: grey stays grey; YCbCr and RGB
// become RGB (or YCbCr its luma alone); CMYK and YCCK become CMYK, converted here.
J_COLOR_SPACE output_space(const jpeg_decompress_struct& cinfo, bool luma_only, int* channels) {
  switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
      *channels = 1;
      return JCS_GRAYSCALE;
    case JCS_YCbCr:
      *channels = luma_only ? 1 : 3;
      return luma_only ? JCS_GRAYSCALE : JCS_RGB;
    case JCS_RGB:
      *channels = 3;
      return JCS_RGB;
    case JCS_CMYK:
    case JCS_YCCK:
      *channels = 4;
      return JCS_CMYK;
    default:
      *channels = 0;
      return JCS_UNKNOWN;
  }
}

// stbi__blinn_8x8: x * y / 255, rounded.
uint8_t times(uint8_t x, uint8_t y) {
  const unsigned t = unsigned{x} * y + 128;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

// CMYK to RGB as stb_image did for Adobe files, which store every sample inverted
// (R = C' * K' / 255); a file without the Adobe marker stores them plain.
std::vector<uint8_t> cmyk_to_rgb(const std::vector<uint8_t>& cmyk, bool inverted) {
  std::vector<uint8_t> rgb(cmyk.size() / 4 * 3);
  for (size_t i = 0, j = 0; i < cmyk.size(); i += 4, j += 3) {
    const uint8_t flip = inverted ? 0 : 255, k = cmyk[i + 3] ^ flip;
    for (int c = 0; c < 3; ++c) rgb[j + c] = times(cmyk[i + c] ^ flip, k);
  }
  return rgb;
}

// Reads the header into handle and picks the output colour space; the header's channels are
// what the caller gets (CMYK as RGB).
ImageHeader open_jpeg(JpegHandle& handle,
                      const uint8_t* bytes,
                      size_t size,
                      const std::string& name,
                      long max_memory,
                      bool luma_only) {
  JpegRead& read = handle.read;
  if (!read_header(&read, bytes, size, max_memory))
    throw std::runtime_error(name + ": cannot decode JPEG (" + read.error + ")");
  int channels = 0;
  read.cinfo.out_color_space = output_space(read.cinfo, luma_only, &channels);
  if (channels == 0)
    throw std::runtime_error(name + ": cannot decode JPEG (" +
                             std::to_string(read.cinfo.num_components) +
                             " components in an unknown colour space; expected grey, YCbCr, "
                             "RGB or CMYK)");
  return {ImageFormat::kJpeg,
          read.cinfo.image_width,
          read.cinfo.image_height,
          channels == 4 ? 3 : channels};
}

}  // namespace

ImageHeader read_jpeg_header(const uint8_t* bytes, size_t size, const std::string& name) {
  JpegHandle handle;
  return open_jpeg(handle, bytes, size, name, 0, false);
}

DecodedImage decode_jpeg(const uint8_t* bytes,
                         size_t size,
                         const std::string& name,
                         const DecodeLimits& limits,
                         bool luma_only) {
  JpegHandle handle;
  JpegRead& read = handle.read;
  read.max_scans = limits.max_jpeg_scans;
  const ImageHeader header =
      open_jpeg(handle, bytes, size, name, static_cast<long>(limits.max_jpeg_memory), luma_only);
  check_size(header, name, limits);
  const int channels = read.cinfo.out_color_space == JCS_CMYK ? 4 : int(header.channels);
  DecodedImage image{header.width, header.height, channels, {}};
  image.pixels.resize(static_cast<size_t>(header.width * header.height * channels));
  if (!read_pixels(&read, image.pixels.data(), static_cast<size_t>(header.width * channels)))
    throw std::runtime_error(name + ": cannot decode JPEG (" + read.error + ")");
  if (channels == 4) {
    image.pixels = cmyk_to_rgb(image.pixels, read.cinfo.saw_Adobe_marker);
    image.channels = 3;
  }
  return image;
}

}  // namespace combiner::util::detail
