// PNG writing with stb_image_write: images are encoded to memory, then written atomically.
// The heatmap colour map is viridis, interpolated linearly between nine control points taken
// from matplotlib's table, which is close enough to keep it perceptually uniform.
#include "util/image_io.h"

#include <stb/stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "util/atomic_file.h"

namespace combiner::util {
namespace {

constexpr uint8_t kGridBackground = 128;

// Encodes uint8 [H, W, C] (contiguous); name is used in messages.
EncodedPng encode_png(
    const std::string& name, const uint8_t* data, int64_t h, int64_t w, int64_t c) {
  EncodedPng result{{}, h, w, c};
  std::vector<uint8_t>& png = result.bytes;
  const auto append = [](void* context, void* bytes, int size) {
    auto* out = static_cast<std::vector<uint8_t>*>(context);
    out->insert(out->end(), static_cast<uint8_t*>(bytes), static_cast<uint8_t*>(bytes) + size);
  };
  if (!stbi_write_png_to_func(append,
                              &png,
                              static_cast<int>(w),
                              static_cast<int>(h),
                              static_cast<int>(c),
                              data,
                              static_cast<int>(w * c)))
    throw std::runtime_error("write_png '" + name + "': PNG encoding failed");
  return result;
}

void check_image_tensor(const std::string& path,
                        const torch::Tensor& t,
                        int64_t dims,
                        const char* layout) {
  if (t.scalar_type() != torch::kUInt8 || t.dim() != dims || t.numel() == 0 ||
      (t.size(-1) != 1 && t.size(-1) != 3))
    throw std::invalid_argument("'" + path + "': expected a non-empty uint8 " + layout +
                                " tensor with C in {1, 3}, found " +
                                std::string(c10::toString(t.scalar_type())) + " " +
                                c10::str(t.sizes()));
}

}  // namespace

void viridis(float t, uint8_t rgb[3]) {
  static constexpr float kStops[9][3] = {
      {0.267f, 0.005f, 0.329f},
      {0.279f, 0.175f, 0.483f},
      {0.230f, 0.322f, 0.546f},
      {0.173f, 0.449f, 0.558f},
      {0.128f, 0.567f, 0.551f},
      {0.153f, 0.683f, 0.504f},
      {0.362f, 0.786f, 0.387f},
      {0.663f, 0.862f, 0.196f},
      {0.993f, 0.906f, 0.144f},
  };
  t = std::isfinite(t) ? std::clamp(t, 0.0f, 1.0f) : 0.0f;
  const float x = t * 8.0f;
  const int i = std::min(static_cast<int>(x), 7);
  const float f = x - static_cast<float>(i);
  for (int c = 0; c < 3; ++c) {
    const float v = kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c]);
    rgb[c] = static_cast<uint8_t>(std::lround(v * 255.0f));
  }
}

void write_png(const std::string& path, const EncodedPng& png) {
  write_file_atomic(path, [&](std::ostream& out) {
    out.write(reinterpret_cast<const char*>(png.bytes.data()),
              static_cast<std::streamsize>(png.bytes.size()));
  });
}

void write_png(const std::string& path, const torch::Tensor& image) {
  check_image_tensor(path, image, 3, "[H, W, C]");
  const torch::Tensor data = image.to(torch::kCPU).contiguous();
  write_png(path,
            encode_png(path, data.data_ptr<uint8_t>(), data.size(0), data.size(1), data.size(2)));
}

GridLayout grid_layout(
    int64_t count, int64_t height, int64_t width, int64_t scale, int64_t columns) {
  if (count < 1 || height < 1 || width < 1 || scale < 1 || columns < 0)
    throw std::invalid_argument(
        "grid_layout: expected count, height, width, scale >= 1 and "
        "columns >= 0, found " +
        std::to_string(count) + ", " + std::to_string(height) + ", " + std::to_string(width) +
        ", " + std::to_string(scale) + ", " + std::to_string(columns));
  GridLayout g;
  g.columns = columns > 0 ? std::min(columns, count)
                          : static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(count))));
  // sqrt can round up past an exact square; fix it with integer arithmetic.
  while (columns == 0 && g.columns > 1 && (g.columns - 1) * (g.columns - 1) >= count) --g.columns;
  g.rows = (count + g.columns - 1) / g.columns;
  g.height = g.rows * height * scale + (g.rows + 1) * kGridPadding;
  g.width = g.columns * width * scale + (g.columns + 1) * kGridPadding;
  return g;
}

void write_image_grid(const std::string& path,
                      const torch::Tensor& images,
                      int64_t scale,
                      int64_t columns) {
  write_png(path, image_grid_png(path, images, scale, columns));
}

EncodedPng image_grid_png(const std::string& path,
                          const torch::Tensor& images,
                          int64_t scale,
                          int64_t columns) {
  check_image_tensor(path, images, 4, "[N, H, W, C]");
  const torch::Tensor data = images.to(torch::kCPU).contiguous();
  const int64_t N = data.size(0), H = data.size(1), W = data.size(2), C = data.size(3);
  const GridLayout g = grid_layout(N, H, W, scale, columns);
  std::vector<uint8_t> canvas(g.height * g.width * C, kGridBackground);
  const uint8_t* src = data.data_ptr<uint8_t>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t top = kGridPadding + (n / g.columns) * (H * scale + kGridPadding);
    const int64_t left = kGridPadding + (n % g.columns) * (W * scale + kGridPadding);
    for (int64_t y = 0; y < H * scale; ++y)
      for (int64_t x = 0; x < W * scale; ++x)
        std::copy_n(src + ((n * H + y / scale) * W + x / scale) * C,
                    C,
                    canvas.data() + ((top + y) * g.width + left + x) * C);
  }
  return encode_png(path, canvas.data(), g.height, g.width, C);
}

void write_heatmap(const std::string& path, const torch::Tensor& values, int64_t scale) {
  write_png(path, heatmap_png(path, values, scale));
}

EncodedPng heatmap_png(const std::string& path, const torch::Tensor& values, int64_t scale) {
  if (values.dim() != 2 || values.numel() == 0 || !values.is_floating_point() || scale < 1)
    throw std::invalid_argument("write_heatmap '" + path +
                                "': expected a non-empty float [H, W] "
                                "tensor and scale >= 1, found " +
                                std::string(c10::toString(values.scalar_type())) + " " +
                                c10::str(values.sizes()) + ", scale " + std::to_string(scale));
  const torch::Tensor v = values.detach().to(torch::kCPU, torch::kFloat).contiguous();
  if (!torch::isfinite(v).all().item<bool>())
    throw std::invalid_argument("write_heatmap '" + path + "': values contain NaN or infinity");
  const float lo = v.min().item<float>(), hi = v.max().item<float>();
  const float range = hi > lo ? hi - lo : 1.0f;
  const int64_t H = v.size(0), W = v.size(1);
  const float* src = v.data_ptr<float>();
  std::vector<uint8_t> canvas(H * scale * W * scale * 3);
  for (int64_t y = 0; y < H * scale; ++y)
    for (int64_t x = 0; x < W * scale; ++x)
      viridis((src[(y / scale) * W + x / scale] - lo) / range,
              canvas.data() + (y * W * scale + x) * 3);
  return encode_png(path, canvas.data(), H * scale, W * scale, 3);
}

}  // namespace combiner::util
