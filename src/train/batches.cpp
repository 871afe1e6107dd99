#include "train/batches.h"

#include <cstring>

namespace combiner::train {

BatchStream::BatchStream(const data::ImageSet& images, int64_t seed)
    : images_(images), seed_(seed) {
  TORCH_CHECK(images.count > 0, "cannot draw batches from an empty image set");
}

const torch::Tensor& BatchStream::permutation(int64_t epoch) {
  if (epoch != cached_epoch_) {
    // A generator of its own, so the data order never depends on dropout or initialisation.
    auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(seed_) * 1000003ULL +
                                                    static_cast<uint64_t>(epoch));
    cached_permutation_ = torch::randperm(images_.count, generator, torch::kLong);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

torch::Tensor BatchStream::take(int64_t position, int64_t count, bool pinned) {
  const int64_t L = images_.shape.length();
  auto out = torch::empty({count, L}, torch::TensorOptions(torch::kUInt8).pinned_memory(pinned));
  auto* dst = out.data_ptr<uint8_t>();
  for (int64_t n = 0; n < count; ++n) {
    const int64_t index = position + n;
    const int64_t image = permutation(index / images_.count)[index % images_.count].item<int64_t>();
    std::memcpy(dst + n * L, images_.image(image), L);
  }
  return out;
}

torch::Tensor image_range(const data::ImageSet& images, int64_t first, int64_t count) {
  const int64_t L = images.shape.length();
  TORCH_CHECK(first >= 0 && count >= 0 && first + count <= images.count,
              "image range [",
              first,
              ", ",
              first + count,
              ") outside a set of ",
              images.count);
  auto out = torch::empty({count, L}, torch::kUInt8);
  std::memcpy(out.data_ptr<uint8_t>(), images.image(first), count * L);
  return out;
}

}  // namespace combiner::train
