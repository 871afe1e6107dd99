// Bits/dim of a model on a whole split: every image counted once, no dropped remainder.
#pragma once

#include <torch/torch.h>

#include "data/image_set.h"
#include "model/transformer.h"

namespace combiner::train {

struct Evaluation {
  double bits_per_dim = 0.0;  // mean over images of each image's mean bits per subpixel
  int64_t images = 0;
  torch::Tensor bits;  // float32 [N, L] bits per subpixel, when asked for
};

Evaluation evaluate(model::ImageTransformer& model,
                    const data::ImageSet& images,
                    int64_t batch_size,
                    bool keep_bits = false);

}  // namespace combiner::train
