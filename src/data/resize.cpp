// Crop, then copy or resize. stb_image_resize runs only when a side's length changes: at scale 1
// its non-interpolating filters (Mitchell, and the box's trapezoid) would still blur, which is
// what packing a folder of images that already have the packed size must never do.
#include "data/resize.h"

#include <stb/stb_image_resize.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace combiner::data {
namespace {

struct FilterName {
  ResizeFilter filter;
  const char* name;
  stbir_filter stb;
};
constexpr FilterName kFilters[] = {
    {ResizeFilter::kBox, "box", STBIR_FILTER_BOX},
    {ResizeFilter::kTriangle, "triangle", STBIR_FILTER_TRIANGLE},
    {ResizeFilter::kMitchell, "mitchell", STBIR_FILTER_MITCHELL},
    {ResizeFilter::kCatmullRom, "catmull-rom", STBIR_FILTER_CATMULLROM},
};

const FilterName& entry(ResizeFilter filter) {
  for (const auto& f : kFilters)
    if (f.filter == filter) return f;
  throw std::logic_error("unknown ResizeFilter " + std::to_string(static_cast<uint32_t>(filter)));
}

// The filter along one side of `from` pixels becoming `to`. A side that keeps its length while
// the other changes gets Catmull-Rom, which is 1 at 0 and 0 at every other whole offset: an
// exact copy along that side.
stbir_filter side_filter(int64_t from, int64_t to, const ResizeFilters& filters) {
  if (from > to) return entry(filters.shrink).stb;
  if (from < to) return entry(filters.enlarge).stb;
  return STBIR_FILTER_CATMULLROM;
}

}  // namespace

const char* resize_filter_name(ResizeFilter filter) {
  return entry(filter).name;
}

ResizeFilter parse_resize_filter(const std::string& name, const std::string& flag) {
  for (const auto& f : kFilters)
    if (name == f.name) return f.filter;
  throw std::invalid_argument(flag + " '" + name +
                              "': expected box, triangle, mitchell or catmull-rom");
}

bool is_resize_filter(uint32_t code) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const FilterName& f) {
    return static_cast<uint32_t>(f.filter) == code;
  });
}

Fit fit_image(const uint8_t* pixels,
              int64_t w,
              int64_t h,
              const ImageShape& shape,
              const ResizeFilters& filters,
              uint8_t* out,
              const std::string& name) {
  const int64_t W = shape.width, H = shape.height, C = shape.channels;
  // The largest centred crop of aspect W:H: crop width cw = h * W / H when that fits, else crop
  // height ch = w * H / W, rounded to the nearest pixel.
  int64_t cw = w, ch = h;
  if (w * H > h * W)
    cw = std::max<int64_t>(1, (h * W + H / 2) / H);
  else
    ch = std::max<int64_t>(1, (w * H + W / 2) / W);
  const int64_t x0 = (w - cw) / 2, y0 = (h - ch) / 2;
  const uint8_t* crop = pixels + (y0 * w + x0) * C;

  Fit fit;
  fit.cropped = cw != w || ch != h;
  if (cw == W && ch == H) {
    for (int64_t y = 0; y < H; ++y)
      std::memcpy(out + y * W * C, crop + y * w * C, static_cast<size_t>(W * C));
    return fit;
  }
  fit.resampling = cw < W || ch < H ? Resampling::kEnlarged : Resampling::kShrunk;
  if (!stbir_resize(crop,
                    static_cast<int>(cw),
                    static_cast<int>(ch),
                    static_cast<int>(w * C),
                    out,
                    static_cast<int>(W),
                    static_cast<int>(H),
                    static_cast<int>(W * C),
                    STBIR_TYPE_UINT8,
                    static_cast<int>(C),
                    STBIR_ALPHA_CHANNEL_NONE,
                    0,
                    STBIR_EDGE_CLAMP,
                    STBIR_EDGE_CLAMP,
                    side_filter(cw, W, filters),
                    side_filter(ch, H, filters),
                    STBIR_COLORSPACE_LINEAR,
                    nullptr))
    throw std::runtime_error(name + ": resize failed");
  return fit;
}

}  // namespace combiner::data
