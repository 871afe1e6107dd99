// image_decode: every PNG layout decodes to its exact samples and to stb_image's pixels at 1 and
// 3 channels; JPEG (baseline, progressive, grey, RGB, Adobe CMYK and YCCK) close to what was
// encoded and to stb_image; limits refuse huge headers before decoding; damaged files (truncated,
// corrupt scans, bad CRCs, palette indexes past the palette) are refused naming the file.
#include "util/image_decode.h"

#include <gtest/gtest.h>
#include <stb/stb_image.h>
#include <zlib.h>

#include <memory>

#include "util/image_files.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::jpeg_file;
using combiner::testing::JpegLayout;
using combiner::testing::png_file;
using combiner::testing::PngLayout;
using Bytes = std::vector<uint8_t>;

DecodedImage decode(const Bytes& bytes, int64_t channels = 0, const DecodeLimits& limits = {}) {
  return decode_image_bytes(bytes.data(), bytes.size(), "f.img", channels, limits);
}

// stb_image's pixels at `channels`, as the project decoded files before.
Bytes stb(const Bytes& bytes, int channels) {
  int w = 0, h = 0, n = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> p(
      stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &n, channels),
      stbi_image_free);
  return p ? Bytes(p.get(), p.get() + w * h * channels) : Bytes{};
}

int max_difference(const Bytes& a, const Bytes& b) {
  EXPECT_EQ(a.size(), b.size());
  int most = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    most = std::max(most, std::abs(int(a[i]) - int(b[i])));
  return most;
}

// Samples below 2^bits that vary along x, y and the channel.
std::vector<uint16_t> samples(int w, int h, int channels, int bits) {
  std::vector<uint16_t> s(static_cast<size_t>(w * h * channels));
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = static_cast<uint16_t>((i * 2654435761u >> 7) % (1u << bits));
  return s;
}

TEST(DecodePng, EveryLayoutGivesItsSamplesAndStbPixels) {
  struct Case {
    int colour_type, bit_depth, channels;
    bool interlaced;
  };
  const std::vector<Case> cases = {
      {PNG_COLOR_TYPE_GRAY, 1, 1, false},
      {PNG_COLOR_TYPE_GRAY, 2, 1, false},
      {PNG_COLOR_TYPE_GRAY, 4, 1, true},
      {PNG_COLOR_TYPE_GRAY, 8, 1, false},
      {PNG_COLOR_TYPE_GRAY, 16, 1, false},
      {PNG_COLOR_TYPE_GRAY_ALPHA, 8, 2, false},
      {PNG_COLOR_TYPE_GRAY_ALPHA, 16, 2, true},
      {PNG_COLOR_TYPE_RGB, 8, 3, true},
      {PNG_COLOR_TYPE_RGB, 16, 3, false},
      {PNG_COLOR_TYPE_RGB_ALPHA, 8, 4, false},
      {PNG_COLOR_TYPE_RGB_ALPHA, 16, 4, true},
  };
  const int w = 13, h = 7;
  for (const Case& c : cases) {
    SCOPED_TRACE("colour type " + std::to_string(c.colour_type) + ", " +
                 std::to_string(c.bit_depth) + " bits" + (c.interlaced ? ", interlaced" : ""));
    const auto s = samples(w, h, c.channels, c.bit_depth);
    PngLayout layout{w, h, c.colour_type, c.bit_depth, c.interlaced, {}, {}, true};
    const Bytes file = png_file(layout, s);
    ASSERT_FALSE(file.empty());
    // The file's own channels: 16-bit samples keep their high byte, fewer bits are scaled to
    // 0..255 (1 bit: 0 or 255).
    Bytes expected(s.size());
    for (size_t i = 0; i < s.size(); ++i)
      expected[i] = static_cast<uint8_t>(c.bit_depth == 16 ? s[i] >> 8
                                                           : s[i] * 255 / ((1 << c.bit_depth) - 1));
    const DecodedImage own = decode(file);
    EXPECT_EQ(own.width, w);
    EXPECT_EQ(own.height, h);
    EXPECT_EQ(own.channels, c.channels);
    EXPECT_EQ(own.pixels, expected);
    const ImageHeader header = read_image_header(file.data(), file.size(), "f.png");
    EXPECT_EQ(header.format, ImageFormat::kPng);
    EXPECT_EQ(header.channels, c.channels);
    for (int channels : {1, 3, 4}) {
      SCOPED_TRACE(std::to_string(channels) + " channels");
      EXPECT_EQ(decode(file, channels).pixels, stb(file, channels));
    }
  }
}

TEST(DecodePng, PalettesBecomeRgbAndIgnoreTransparency) {
  const std::vector<png_color> palette = {{0, 0, 0}, {255, 0, 0}, {10, 200, 30}, {1, 2, 3}};
  for (int depth : {2, 4, 8}) {
    SCOPED_TRACE(std::to_string(depth) + " bits");
    const auto index = samples(9, 5, 1, 2);
    const Bytes file =
        png_file({9, 5, PNG_COLOR_TYPE_PALETTE, depth, depth == 4, palette, {0, 128}, true}, index);
    ASSERT_FALSE(file.empty());
    Bytes expected;
    for (uint16_t i : index)
      expected.insert(expected.end(), {palette[i].red, palette[i].green, palette[i].blue});
    const DecodedImage image = decode(file);
    EXPECT_EQ(image.channels, 3);
    EXPECT_EQ(image.pixels, expected);
    EXPECT_EQ(decode(file, 1).pixels, stb(file, 1));
    EXPECT_EQ(decode(file, 3).pixels, stb(file, 3));
  }
}

TEST(DecodePng, IndexesPastThePaletteAreRefused) {
  const std::vector<png_color> palette = {{0, 0, 0}, {255, 255, 255}};
  const Bytes file = png_file({4, 2, PNG_COLOR_TYPE_PALETTE, 8, false, palette, {}, false},
                              {0, 1, 0, 1, 1, 5, 0, 1});
  ASSERT_FALSE(file.empty());
  expect_throw_with<std::runtime_error>([&] { decode(file); },
                                        {"f.img", "palette index 5 in a palette of 2 colours"});
}

TEST(DecodePng, DamagedFilesAreRefusedNamingTheFile) {
  const Bytes good =
      png_file({16, 16, PNG_COLOR_TYPE_RGB, 8, false, {}, {}, true}, samples(16, 16, 3, 8));
  ASSERT_EQ(decode(good, 3).pixels.size(), 768u);
  Bytes cut(good.begin(), good.end() - 30);  // IDAT's end and IEND missing
  expect_throw_with<std::runtime_error>([&] { decode(cut); }, {"f.img", "cannot decode PNG"});
  Bytes crc = good;
  crc[29] ^= 1;  // IHDR's CRC
  expect_throw_with<std::runtime_error>([&] { decode(crc); },
                                        {"f.img", "cannot decode PNG", "CRC"});
  Bytes idat = good;
  idat[good.size() - 20] ^= 0x55;  // inside the compressed data
  expect_throw_with<std::runtime_error>([&] { decode(idat); }, {"f.img", "cannot decode PNG"});
  Bytes colour = good;
  colour[25] = 5;  // colour type 5 does not exist
  expect_throw_with<std::runtime_error>([&] { decode(colour); }, {"f.img", "colour type 5"});
}

// A PNG signature and IHDR of width x height RGBA, CRC included, and nothing after it.
Bytes png_header(uint32_t width, uint32_t height) {
  const Bytes one =
      png_file({1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, false, {}, {}, true}, {1, 2, 3, 4});
  Bytes header(one.begin(), one.begin() + 33);
  for (int i = 0; i < 4; ++i) {
    header[16 + i] = static_cast<uint8_t>(width >> (24 - 8 * i));
    header[20 + i] = static_cast<uint8_t>(height >> (24 - 8 * i));
  }
  const uint32_t crc = static_cast<uint32_t>(crc32(0, header.data() + 12, 17));  // "IHDR" + data
  for (int i = 0; i < 4; ++i) header[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  return header;
}

TEST(DecodeLimits, HugeHeadersAreRefusedBeforeDecoding) {
  // 100000 x 100000 RGBA would be 40 GB of pixels; the header settles it.
  expect_throw_with<std::runtime_error>(
      [&] { decode(png_header(100000, 100000), 3); },
      {"f.img", "100000 x 100000 pixels, more than 16384 a side"});
  // A JPEG's frame header claiming 65000 x 65000, with no scan after it.
  Bytes jpeg = jpeg_file({16, 16, JCS_RGB, JCS_YCbCr, 90, false}, Bytes(768, 100));
  ASSERT_FALSE(jpeg.empty());
  for (size_t i = 2; i + 8 < jpeg.size(); ++i)
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {  // SOF0: length, precision, height, width
      jpeg[i + 5] = jpeg[i + 7] = 0xfd;
      jpeg[i + 6] = jpeg[i + 8] = 0xe8;
      break;
    }
  const ImageHeader header = read_image_header(jpeg.data(), jpeg.size(), "f.jpg");
  EXPECT_EQ(header.width, 65000);
  EXPECT_EQ(header.height, 65000);
  expect_throw_with<std::runtime_error>([&] { decode(jpeg); },
                                        {"f.img", "65000 x 65000 pixels, more than 16384 a side"});
  // Lower limits apply the same way.
  DecodeLimits small;
  small.max_side = 15;
  expect_throw_with<std::runtime_error>([&] { decode(png_header(16, 3), 3, small); },
                                        {"16 x 3 pixels, more than 15 a side"});
}

TEST(DecodeFormat, OnlyPngAndJpegSignaturesAreRead) {
  expect_throw_with<std::runtime_error>(
      [&] {
        decode(Bytes{'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0});
      },
      {"f.img: not a PNG or JPEG image (starts with 47 49 46 38 39 61 01 00; expected 89 50 4e "
       "47"});
  expect_throw_with<std::runtime_error>([&] { decode(Bytes{}); }, {"f.img", "empty file"});
  expect_throw_with<std::invalid_argument>([&] { decode(png_header(2, 2), 5); },
                                           {"f.img", "asked for 5 channels"});
}

// A smooth w x h image with `components` samples per pixel.
Bytes smooth(int w, int h, int components) {
  Bytes p(static_cast<size_t>(w * h * components));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < components; ++c)
        p[static_cast<size_t>((y * w + x) * components + c)] =
            static_cast<uint8_t>(20 + 2 * x + 2 * y + 40 * c);
  return p;
}

TEST(DecodeJpeg, BaselineAndProgressiveAreCloseToTheImageAndToStb) {
  const int w = 40, h = 24;
  for (const bool progressive : {false, true})
    for (const J_COLOR_SPACE space : {JCS_GRAYSCALE, JCS_RGB}) {
      const int components = space == JCS_RGB ? 3 : 1;
      SCOPED_TRACE(std::string(progressive ? "progressive" : "baseline") + ", " +
                   std::to_string(components) + " components");
      const Bytes pixels = smooth(w, h, components);
      const Bytes file = jpeg_file(
          {w, h, space, space == JCS_RGB ? JCS_YCbCr : JCS_GRAYSCALE, 95, progressive}, pixels);
      ASSERT_FALSE(file.empty());
      const DecodedImage image = decode(file);
      EXPECT_EQ(image.width, w);
      EXPECT_EQ(image.height, h);
      EXPECT_EQ(image.channels, components);
      EXPECT_LE(max_difference(image.pixels, pixels), 6);
      for (int channels : {1, 3})
        EXPECT_LE(max_difference(decode(file, channels).pixels, stb(file, channels)), 3);
    }
}

TEST(DecodeJpeg, CmykAndYcckBecomeRgbAsStbMadeThem) {
  // Adobe CMYK is stored inverted: 255 - ink. R = C' * K' / 255.
  const int w = 16, h = 16;
  Bytes cmyk;
  for (int i = 0; i < w * h; ++i) cmyk.insert(cmyk.end(), {200, 100, 250, 180});
  for (const J_COLOR_SPACE stored : {JCS_CMYK, JCS_YCCK}) {
    const Bytes file = jpeg_file({w, h, JCS_CMYK, stored, 95, false}, cmyk);
    ASSERT_FALSE(file.empty());
    const DecodedImage image = decode(file, 3);
    ASSERT_EQ(image.channels, 3);
    const Bytes expected = {141, 71, 176};  // 200 * 180 / 255, 100 * 180 / 255, 250 * 180 / 255
    for (int i = 0; i < w * h; ++i)
      for (int c = 0; c < 3; ++c) ASSERT_NEAR(image.pixels[i * 3 + c], expected[c], 3);
    EXPECT_LE(max_difference(image.pixels, stb(file, 3)), 3);
    EXPECT_EQ(read_image_header(file.data(), file.size(), "f.jpg").channels, 3);
  }
}

TEST(DecodeJpeg, DamagedScansAndFloodsAreRefused) {
  const Bytes pixels = smooth(64, 48, 3);
  const Bytes file = jpeg_file({64, 48, JCS_RGB, JCS_YCbCr, 90, false}, pixels);
  ASSERT_FALSE(file.empty());
  // libjpeg would fill a truncated scan with grey and carry on.
  const Bytes cut(file.begin(), file.begin() + static_cast<ptrdiff_t>(file.size() * 2 / 3));
  expect_throw_with<std::runtime_error>([&] { decode(cut); },
                                        {"f.img", "cannot decode JPEG", "Premature end"});
  const Bytes progressive = jpeg_file({64, 48, JCS_RGB, JCS_YCbCr, 90, true}, pixels);
  const Bytes cut_progressive(progressive.begin(), progressive.begin() + 400);
  expect_throw_with<std::runtime_error>([&] { decode(cut_progressive); },
                                        {"f.img", "cannot decode JPEG"});
  // jpeg_simple_progression writes 10 scans for YCbCr.
  DecodeLimits few_scans;
  few_scans.max_jpeg_scans = 4;
  expect_throw_with<std::runtime_error>([&] { decode(progressive, 3, few_scans); },
                                        {"f.img", "more than 4 progressive scans"});
  // A progressive file keeps every coefficient: 2 MiB at 1024 x 1024 RGB, 4:2:0.
  const Bytes big =
      jpeg_file({1024, 1024, JCS_RGB, JCS_YCbCr, 50, true}, Bytes(1024 * 1024 * 3, 9));
  DecodeLimits one_mib;
  one_mib.max_jpeg_memory = 1 << 20;
  expect_throw_with<std::runtime_error>(
      [&] { decode(big, 3, one_mib); },
      {"f.img", "cannot decode JPEG (needs more than the limit of 1 MiB of decoder memory)"});
  EXPECT_EQ(decode(big, 3).pixels.size(), 1024u * 1024 * 3);
}

}  // namespace
}  // namespace combiner::util
