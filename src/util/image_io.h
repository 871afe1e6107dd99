// PNG output for samples and attention maps: single images, tiled grids of images and
// colour-mapped heatmaps. Every file is written to path + ".tmp" and renamed into place, so a
// reader (or a crash) never sees half a PNG.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace combiner::util {

// A PNG file's bytes and the size of the image it holds (for TensorBoard image summaries).
struct EncodedPng {
  std::vector<uint8_t> bytes;
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;  // 1 grey, 3 RGB
};

// uint8 [H, W, C], C in {1, 3}.
void write_png(const std::string& path, const torch::Tensor& image);

// Writes an encoded PNG atomically.
void write_png(const std::string& path, const EncodedPng& png);

// Size of the grid write_image_grid draws: columns x rows tiles, each scale*H x scale*W,
// separated and surrounded by kGridPadding pixels.
constexpr int64_t kGridPadding = 2;
struct GridLayout {
  int64_t columns = 0;
  int64_t rows = 0;
  int64_t height = 0;  // of the whole image, in pixels
  int64_t width = 0;
};
// columns 0 picks ceil(sqrt(count)); std::invalid_argument on count < 1, scale < 1, columns < 0.
GridLayout grid_layout(
    int64_t count, int64_t height, int64_t width, int64_t scale, int64_t columns);

// uint8 [N, H, W, C], C in {1, 3}: tiles in row-major order on a grey background, each pixel
// repeated scale x scale (nearest neighbour).
void write_image_grid(const std::string& path,
                      const torch::Tensor& images,
                      int64_t scale = 1,
                      int64_t columns = 0);
// The same grid as PNG bytes; name is used in messages.
EncodedPng image_grid_png(const std::string& name,
                          const torch::Tensor& images,
                          int64_t scale = 1,
                          int64_t columns = 0);

// Any float [H, W] normalised min..max (a constant map is drawn at the low end) through the
// viridis colour map, each value drawn as a scale x scale block; non-finite values are refused.
void write_heatmap(const std::string& path, const torch::Tensor& values, int64_t scale = 8);
// The same heatmap as PNG bytes; name is used in messages.
EncodedPng heatmap_png(const std::string& name, const torch::Tensor& values, int64_t scale = 8);

// The viridis colour of t in [0, 1] (clamped), as R, G, B bytes.
void viridis(float t, uint8_t rgb[3]);

}  // namespace combiner::util
