// image_io: PNGs read back with stb_image match the tensors pixel for pixel; grid layout
// arithmetic; grid tiles, scaling and padding; heatmap colours at the ends of the range.
#include "util/image_io.h"

#include <stb/stb_image.h>

#include <filesystem>
#include <memory>

#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;

struct Png {
  int width = 0, height = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

Png read_png(const std::string& path) {
  Png png;
  std::unique_ptr<stbi_uc, void (*)(void*)> data(
      stbi_load(path.c_str(), &png.width, &png.height, &png.channels, 0), stbi_image_free);
  if (!data) throw std::runtime_error("test: cannot decode " + path);
  png.pixels.assign(data.get(), data.get() + png.width * png.height * png.channels);
  return png;
}

TEST(WritePng, RoundTripsRgbAndGrey) {
  TempDir dir;
  for (int64_t channels : {3, 1}) {
    const torch::Tensor image = torch::randint(0, 256, {5, 7, channels}, torch::kUInt8);
    const std::string path = dir.file("c" + std::to_string(channels) + ".png");
    write_png(path, image);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    const Png png = read_png(path);
    EXPECT_EQ(png.width, 7);
    EXPECT_EQ(png.height, 5);
    EXPECT_EQ(png.channels, channels);
    EXPECT_EQ(
        png.pixels,
        std::vector<uint8_t>(image.data_ptr<uint8_t>(), image.data_ptr<uint8_t>() + image.numel()));
  }
}

TEST(WritePng, RefusesBadTensorsAndPaths) {
  TempDir dir;
  const std::string path = dir.file("x.png");
  EXPECT_THROW(write_png(path, torch::zeros({4, 4, 3})), std::invalid_argument);
  EXPECT_THROW(write_png(path, torch::zeros({4, 4, 4}, torch::kUInt8)), std::invalid_argument);
  EXPECT_THROW(write_png(path, torch::zeros({4, 4}, torch::kUInt8)), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(path));
  const std::string missing = dir.file("absent/x.png");
  expect_throw_with<std::runtime_error>(
      [&] {
        write_png(missing, torch::zeros({2, 2, 3}, torch::kUInt8));
      },
      {missing});
}

TEST(GridLayout, NearSquareAndExplicitColumns) {
  GridLayout g = grid_layout(10, 8, 8, 2, 0);
  EXPECT_EQ(g.columns, 4);
  EXPECT_EQ(g.rows, 3);
  EXPECT_EQ(g.width, 4 * 16 + 5 * kGridPadding);
  EXPECT_EQ(g.height, 3 * 16 + 4 * kGridPadding);
  EXPECT_EQ(grid_layout(16, 8, 8, 1, 0).columns, 4);
  EXPECT_EQ(grid_layout(17, 8, 8, 1, 0).columns, 5);
  EXPECT_EQ(grid_layout(1, 8, 8, 1, 0).columns, 1);
  g = grid_layout(10, 4, 6, 1, 3);
  EXPECT_EQ(g.columns, 3);
  EXPECT_EQ(g.rows, 4);
  EXPECT_EQ(g.width, 3 * 6 + 4 * kGridPadding);
  EXPECT_EQ(grid_layout(3, 4, 4, 1, 10).columns, 3);  // never wider than the images
  EXPECT_THROW(grid_layout(0, 4, 4, 1, 0), std::invalid_argument);
  EXPECT_THROW(grid_layout(2, 4, 4, 0, 0), std::invalid_argument);
  EXPECT_THROW(grid_layout(2, 4, 4, 1, -1), std::invalid_argument);
}

TEST(WriteImageGrid, TilesScaledImagesWithPadding) {
  TempDir dir;
  const int64_t N = 5, H = 3, W = 2, C = 3, scale = 3;
  const torch::Tensor images = torch::randint(0, 256, {N, H, W, C}, torch::kUInt8);
  const std::string path = dir.file("grid.png");
  write_image_grid(path, images, scale);
  const GridLayout g = grid_layout(N, H, W, scale, 0);
  const Png png = read_png(path);
  ASSERT_EQ(png.width, g.width);
  ASSERT_EQ(png.height, g.height);
  ASSERT_EQ(png.channels, C);
  const auto at = [&](int64_t y, int64_t x, int64_t c) {
    return png.pixels[(y * png.width + x) * C + c];
  };
  for (int64_t n = 0; n < N; ++n) {
    const int64_t top = kGridPadding + (n / g.columns) * (H * scale + kGridPadding);
    const int64_t left = kGridPadding + (n % g.columns) * (W * scale + kGridPadding);
    for (int64_t y = 0; y < H * scale; ++y)
      for (int64_t x = 0; x < W * scale; ++x)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(at(top + y, left + x, c), images[n][y / scale][x / scale][c].item<uint8_t>())
              << n << " " << y << " " << x;
  }
  EXPECT_EQ(at(0, 0, 0), 128);                       // the border is background
  EXPECT_EQ(at(g.height - 1, g.width - 1, 2), 128);  // and so is the empty sixth tile

  write_image_grid(dir.file("grey.png"), torch::zeros({2, 4, 4, 1}, torch::kUInt8), 1, 1);
  const Png grey = read_png(dir.file("grey.png"));
  EXPECT_EQ(grey.channels, 1);
  EXPECT_EQ(grey.width, 4 + 2 * kGridPadding);
  EXPECT_EQ(grey.height, 8 + 3 * kGridPadding);
}

TEST(WriteHeatmap, MapsMinAndMaxToTheColourMapEnds) {
  TempDir dir;
  const torch::Tensor values = torch::arange(6, torch::kFloat).reshape({2, 3}) * 0.1 - 5;
  write_heatmap(dir.file("h.png"), values, 4);
  const Png png = read_png(dir.file("h.png"));
  ASSERT_EQ(png.width, 12);
  ASSERT_EQ(png.height, 8);
  ASSERT_EQ(png.channels, 3);
  uint8_t low[3], high[3];
  viridis(0.0f, low);
  viridis(1.0f, high);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(png.pixels[c], low[c]);
    EXPECT_EQ(png.pixels[(8 * 12 - 1) * 3 + c], high[c]);
  }
  // viridis runs dark purple to yellow, and its luminance rises monotonically.
  EXPECT_LT(low[1], 10);
  EXPECT_GT(high[0], 240);
  float previous = -1;
  for (int i = 0; i <= 20; ++i) {
    uint8_t rgb[3];
    viridis(i / 20.0f, rgb);
    const float luma = 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2];
    EXPECT_GT(luma, previous) << i;
    previous = luma;
  }
  EXPECT_NO_THROW(write_heatmap(dir.file("flat.png"), torch::ones({3, 3}), 1));
  EXPECT_THROW(write_heatmap(dir.file("nan.png"), torch::full({2, 2}, NAN)), std::invalid_argument);
  EXPECT_THROW(write_heatmap(dir.file("3d.png"), torch::ones({2, 2, 2})), std::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("nan.png")));
}

}  // namespace
}  // namespace combiner::util
