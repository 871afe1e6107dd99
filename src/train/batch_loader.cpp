#include "train/batch_loader.h"

namespace combiner::train {

BatchLoader::BatchLoader(const data::ImageSet& images, int64_t seed, const torch::Device& device)
    : stream_(images, seed), device_(device), pinned_(device.is_cuda()) {}

BatchLoader::~BatchLoader() {
  if (pending_.valid()) pending_.wait();
}

torch::Tensor BatchLoader::take(int64_t position, int64_t count, int64_t next) {
  torch::Tensor batch;
  if (pending_.valid()) {
    auto prefetched = pending_.get();  // rethrows a failed gather
    if (pending_position_ == position && pending_count_ == count) batch = std::move(prefetched);
  }
  if (!batch.defined()) batch = stream_.take(position, count, pinned_);
  if (next >= 0) {
    pending_position_ = next;
    pending_count_ = count;
    pending_ = std::async(std::launch::async,
                          [this, next, count] { return stream_.take(next, count, pinned_); });
  }
  // From pinned memory the copy is asynchronous: the step's kernels queue behind it.
  return batch.to(device_, /*non_blocking=*/pinned_);
}

}  // namespace combiner::train
