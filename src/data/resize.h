// One decoded image to the packed size: the largest centred crop of the target's aspect, then a
// plain copy when that crop already has the target size (no filter touches it, so the packed
// bytes are the file's), else stb_image_resize with the filter chosen for each direction.
#pragma once

#include <cstdint>
#include <string>

#include "data/image_set.h"

namespace combiner::data {

// stb_image_resize's filters that combiner-data pack offers. The values are stored in packed
// headers (data/packed.h): never renumber them.
enum class ResizeFilter : uint32_t {
  kBox = 1,         // area averaging at whole-number ratios (a trapezoid with 1-pixel ramps else)
  kTriangle = 2,    // a tent: bilinear interpolation when enlarging
  kMitchell = 3,    // cubic B = C = 1/3: smooths, does not interpolate
  kCatmullRom = 4,  // the interpolating cubic (B = 0, C = 1/2)
};

// "box", "triangle", "mitchell", "catmull-rom".
const char* resize_filter_name(ResizeFilter filter);
// The filter a name (as resize_filter_name writes it) stands for; std::invalid_argument
// "<flag> '<name>': expected box, triangle, mitchell or catmull-rom" otherwise.
ResizeFilter parse_resize_filter(const std::string& name, const std::string& flag);
// Whether a header field holds one of ResizeFilter's values.
bool is_resize_filter(uint32_t code);

struct ResizeFilters {
  ResizeFilter shrink = ResizeFilter::kMitchell;     // along a side longer than the target's
  ResizeFilter enlarge = ResizeFilter::kCatmullRom;  // along a side shorter than the target's
};

// What fit_image did to one image. A side that already has the target length is never filtered,
// so kShrunk and kEnlarged say only that at least one side was.
enum class Resampling { kCopied, kShrunk, kEnlarged };  // kEnlarged: some side grew
struct Fit {
  Resampling resampling = Resampling::kCopied;
  bool cropped = false;  // the source had another aspect than the target; its centre was kept
};

// pixels: h x w x shape.channels bytes (rows top to bottom, channels interleaved); writes
// shape.length() bytes to out in the same order. Centred crop of the target's aspect (rounded to
// whole pixels), then a copy or a resize (edges clamped; values taken as linear).
// std::runtime_error "<name>: resize failed" if stb_image_resize fails (out of memory).
Fit fit_image(const uint8_t* pixels,
              int64_t w,
              int64_t h,
              const ImageShape& shape,
              const ResizeFilters& filters,
              uint8_t* out,
              const std::string& name);

}  // namespace combiner::data
