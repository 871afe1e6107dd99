// Bits/dim of a model on a whole split: every image counted once, no dropped remainder. Under
// several processes each rank scores its own contiguous shard of the images and the sums are
// all-reduced, so the figure is the one-process one.
#pragma once

#include <torch/torch.h>

#include <functional>

#include "data/image_set.h"
#include "model/transformer.h"
#include "train/distributed.h"

namespace combiner::train {

struct Evaluation {
  double bits_per_dim = 0.0;  // mean over images of each image's mean bits per subpixel
  int64_t images = 0;         // images scored, over every rank: the split's size
  torch::Tensor bits;         // float32 [N, L] bits per subpixel on the CPU, when asked for
};

// After each batch: images scored so far and this rank's share of the split (its shard).
using EvalProgress = std::function<void(int64_t done, int64_t total)>;

// Runs on the model's device. With `dist` of several ranks this is a collective: every rank
// calls it and gets the same result.
Evaluation evaluate(model::ImageTransformer& model,
                    const data::ImageSet& images,
                    int64_t batch_size,
                    bool keep_bits = false,
                    const Distributed& dist = Distributed(),
                    const EvalProgress& progress = {});

}  // namespace combiner::train
