// Fitting one decoded image to the packed size (data/resize.h): an image that already has the
// size, or whose centred crop has it, is copied byte for byte whatever the filter; real resizes
// use the filter asked for in each direction, checked against values worked out by hand; the
// filter names and a bad name's message.
#include "data/resize.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using Bytes = std::vector<uint8_t>;

constexpr ResizeFilter kAll[] = {ResizeFilter::kBox,
                                 ResizeFilter::kTriangle,
                                 ResizeFilter::kMitchell,
                                 ResizeFilter::kCatmullRom};

Bytes noise(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(static_cast<size_t>(n));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  return b;
}

Bytes fit(
    const Bytes& src, int64_t w, int64_t h, const ImageShape& shape, ResizeFilters f, Fit* how) {
  Bytes out(static_cast<size_t>(shape.length()), 0);
  const Fit got = fit_image(src.data(), w, h, shape, f, out.data(), "x.png");
  if (how) *how = got;
  return out;
}

TEST(ResizeFilter, NamesRoundTripAndABadNameSaysWhatIsExpected) {
  for (ResizeFilter f : kAll) {
    EXPECT_EQ(parse_resize_filter(resize_filter_name(f), "--filter"), f);
    EXPECT_TRUE(is_resize_filter(static_cast<uint32_t>(f)));
  }
  EXPECT_STREQ(resize_filter_name(ResizeFilter::kCatmullRom), "catmull-rom");
  EXPECT_FALSE(is_resize_filter(0));
  EXPECT_FALSE(is_resize_filter(5));
  expect_throw_with<std::invalid_argument>(
      [] { parse_resize_filter("lanczos", "--upsample-filter"); },
      {"--upsample-filter 'lanczos'", "expected box, triangle, mitchell or catmull-rom"});
  EXPECT_THROW(parse_resize_filter("Box", "--filter"), std::invalid_argument);
}

// Noise is what a filter at scale 1 would change most: every subpixel must come back as it was,
// in 1 and 3 channels, with every filter asked for in either direction.
TEST(FitImage, TheTargetSizeIsCopiedExactlyWhateverTheFilter) {
  for (int64_t C : {1, 3}) {
    const ImageShape shape{5, 7, C};
    const Bytes src = noise(shape.length(), static_cast<unsigned>(C));
    for (ResizeFilter f : kAll) {
      Fit how;
      EXPECT_EQ(fit(src, 7, 5, shape, {f, f}, &how), src) << resize_filter_name(f) << " C " << C;
      EXPECT_EQ(how.resampling, Resampling::kCopied);
      EXPECT_FALSE(how.cropped);
    }
  }
}

// A source of another aspect is cropped to its centre; when the crop has the target size it is
// copied: 10 x 7 to 7 x 7 keeps columns 1..7, 4 x 9 to 4 x 4 keeps rows 2..5.
TEST(FitImage, ACentredCropOfTheTargetSizeIsCopiedExactly) {
  const Bytes wide = noise(10 * 7 * 3, 7);
  Fit how;
  const Bytes a =
      fit(wide, 10, 7, {7, 7, 3}, {ResizeFilter::kMitchell, ResizeFilter::kMitchell}, &how);
  EXPECT_TRUE(how.cropped);
  EXPECT_EQ(how.resampling, Resampling::kCopied);
  for (int y = 0; y < 7; ++y)
    for (int x = 0; x < 7; ++x)
      for (int k = 0; k < 3; ++k)
        ASSERT_EQ(a[(y * 7 + x) * 3 + k], wide[(y * 10 + x + 1) * 3 + k]) << x << "," << y;
  const Bytes tall = noise(4 * 9, 8);
  const Bytes b = fit(tall, 4, 9, {4, 4, 1}, {}, &how);
  EXPECT_TRUE(how.cropped);
  EXPECT_EQ(how.resampling, Resampling::kCopied);
  EXPECT_EQ(b, Bytes(tall.begin() + 2 * 4, tall.begin() + 6 * 4));
}

// 2 x 2 box averages: each 2 x 2 block holds v, v + 2, v + 4, v + 6 in every channel (a
// different v per block and per channel), so its average v + 3 is a whole number. A filter
// reaching past the block (Mitchell) gets other values; so would a box that does.
TEST(FitImage, BoxShrinkingByTwoAveragesEachTwoByTwoBlock) {
  const int64_t w = 8, h = 6, C = 3;
  Bytes src(static_cast<size_t>(w * h * C));
  auto base = [](int64_t bx, int64_t by, int64_t k) { return 10 + 30 * bx + 9 * by + 50 * k; };
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < C; ++k)
        src[(y * w + x) * C + k] =
            static_cast<uint8_t>(base(x / 2, y / 2, k) + 2 * (x % 2) + 4 * (y % 2));
  Fit how;
  const Bytes box = fit(src, w, h, {3, 4, C}, {ResizeFilter::kBox, ResizeFilter::kBox}, &how);
  EXPECT_EQ(how.resampling, Resampling::kShrunk);
  EXPECT_FALSE(how.cropped);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 4; ++x)
      for (int64_t k = 0; k < C; ++k)
        ASSERT_EQ(box[(y * 4 + x) * C + k], base(x, y, k) + 3) << x << "," << y << "," << k;
  const Bytes mitchell =
      fit(src, w, h, {3, 4, C}, {ResizeFilter::kMitchell, ResizeFilter::kBox}, &how);
  EXPECT_NE(mitchell, box);  // the shrink filter is the one asked for
}

// Enlarging 2 -> 4 columns: pixel centres fall at -0.25, 0.25, 0.75, 1.25 source pixels, so the
// triangle (bilinear, edges clamped) gives a, 3/4 a + 1/4 b, 1/4 a + 3/4 b, b. The shrink filter
// plays no part. Catmull-Rom, f(t) = 1.5|t|^3 - 2.5t^2 + 1 within 1 and -0.5|t|^3 + 2.5t^2 - 4|t| +
// 2 within 2, gives 200 (f(1.25)), 200 (f(.75) + f(1.75)), 200 (f(.25) + f(1.25)), 200 (1 -
// f(1.25)): -14.06 (clamped to 0), 40.63, 159.38, 214.06.
TEST(FitImage, EnlargingUsesTheEnlargeFilter) {
  const Bytes src = {0, 200, 0, 200};  // 2 x 2, grey, columns 0 and 200
  for (const auto& [filter, row] : {std::pair{ResizeFilter::kTriangle, Bytes{0, 50, 150, 200}},
                                    std::pair{ResizeFilter::kCatmullRom, Bytes{0, 41, 159, 214}}}) {
    Fit how;
    const Bytes out = fit(src, 2, 2, {4, 4, 1}, {ResizeFilter::kBox, filter}, &how);
    EXPECT_EQ(how.resampling, Resampling::kEnlarged);
    for (int y = 0; y < 4; ++y)
      EXPECT_EQ(Bytes(out.begin() + y * 4, out.begin() + y * 4 + 4), row)
          << resize_filter_name(filter) << " row " << y;
  }
}

// A crop that keeps one side's length while the other grows (2 x 9 to 2 x 10: the crop of a
// 2 x 9 source to aspect 1:5 is 2 x 9 itself) is not filtered along the kept side, even when
// both filters blur: each column stays its own constant.
TEST(FitImage, ASideThatKeepsItsLengthIsNotFiltered) {
  Bytes src;
  for (int y = 0; y < 9; ++y) src.insert(src.end(), {10, 200});
  Fit how;
  const Bytes out =
      fit(src, 2, 9, {10, 2, 1}, {ResizeFilter::kMitchell, ResizeFilter::kMitchell}, &how);
  EXPECT_EQ(how.resampling, Resampling::kEnlarged);
  EXPECT_FALSE(how.cropped);
  for (int y = 0; y < 10; ++y) {
    EXPECT_EQ(out[y * 2], 10) << y;
    EXPECT_EQ(out[y * 2 + 1], 200) << y;
  }
}

}  // namespace
}  // namespace combiner::data
