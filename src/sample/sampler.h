// Drawing images from a model, one subpixel at a time. This is the plain path: every step
// re-runs the network on the prefix (rounded up to whole image rows, which every attention
// layout accepts), so it costs O(L) forward passes.
#pragma once

#include <torch/torch.h>

#include "model/transformer.h"

namespace combiner::sample {

struct SampleOptions {
  int64_t count = 16;        // images to draw
  double temperature = 1.0;  // softmax temperature; 0 = argmax (deterministic)
  int64_t seed = 0;          // the sampler's own generator
  int64_t batch = 0;         // images drawn together; 0 = all at once
};

// Returns uint8 [N, H, W, C]. Throws std::invalid_argument for count <= 0 or temperature < 0.
torch::Tensor sample_images(model::ImageTransformer& model, const SampleOptions& options);

}  // namespace combiner::sample
