// Drawing images from a model, one subpixel at a time. The default path is the cached decoder
// (model/decoder.h): one step per subpixel at the attention's per-position cost. The plain path
// (cache = false) re-runs the network on the prefix (rounded up to whole image rows, which every
// attention layout accepts) at every step: O(L) forward passes, kept as the reference the cache
// is tested against. Both draw from the same generator in the same order, so the same seed gives
// the same images.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "model/transformer.h"

namespace combiner::sample {

struct SampleOptions {
  int64_t count = 16;        // images to draw
  double temperature = 1.0;  // softmax temperature; 0 = argmax (deterministic)
  int64_t seed = 0;          // the sampler's own generator
  int64_t batch = 0;         // images drawn together; 0 = all at once
  bool cache = true;         // cached incremental decoding; false = plain re-run per step
  // After each decode step: steps done and in all (L per batch of images drawn together).
  std::function<void(int64_t done, int64_t total)> progress;
};

// Returns uint8 [N, H, W, C]. Throws std::invalid_argument for count <= 0, batch < 0 or
// temperature < 0.
torch::Tensor sample_images(model::ImageTransformer& model, const SampleOptions& options);

// Images of subpixels below `vocab` (N-bit data: vocab 2^N) stretched to 0..255 for viewing, as
// the PNG grids show them; 8-bit images (vocab 256) unchanged.
torch::Tensor for_display(const torch::Tensor& images, int64_t vocab);

}  // namespace combiner::sample
