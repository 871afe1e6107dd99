// The training batches, gathered one micro-batch ahead on a thread of their own: while a step
// runs, the next micro-batch's images are copied out of the (memory-mapped) set, into pinned
// memory when the model is on a GPU, so the step does not wait for page faults or copies. The
// images and their order are BatchStream's, so a resumed run sees exactly the same batches.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <future>

#include "data/image_set.h"
#include "train/batches.h"

namespace combiner::train {

class BatchLoader {
 public:
  BatchLoader(const data::ImageSet& images, int64_t seed, const torch::Device& device);
  ~BatchLoader();  // waits for a gather in flight
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Images [position, position + count) of the stream as uint8 [count, L] on the device: the
  // prefetched batch when it is that one, else gathered now. Then starts gathering the count
  // images at `next` (the caller's next take; -1 when there is none).
  torch::Tensor take(int64_t position, int64_t count, int64_t next);

 private:
  BatchStream stream_;  // used by one thread at a time: the gather in flight, else the caller
  torch::Device device_;
  bool pinned_;
  int64_t pending_position_ = -1, pending_count_ = 0;
  std::future<torch::Tensor> pending_;
};

}  // namespace combiner::train
