// Seeded, resumable data order. The training stream is an endless sequence of epochs, each a
// fresh permutation of the training set drawn from (seed, epoch); a batch is a window of that
// stream, so the data position is just the number of images consumed and resuming is exact.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "data/image_set.h"

namespace combiner::train {

class BatchStream {
 public:
  BatchStream(const data::ImageSet& images, int64_t seed);

  // Images [position, position + count) of the stream as uint8 [count, L], in page-locked
  // memory when pinned (for a non-blocking copy to a GPU).
  torch::Tensor take(int64_t position, int64_t count, bool pinned = false);

 private:
  const torch::Tensor& permutation(int64_t epoch);

  const data::ImageSet& images_;
  int64_t seed_;
  int64_t cached_epoch_ = -1;
  torch::Tensor cached_permutation_;
};

// Images [first, first + count) of a set, in order, as uint8 [count, L] (evaluation).
torch::Tensor image_range(const data::ImageSet& images, int64_t first, int64_t count);

}  // namespace combiner::train
