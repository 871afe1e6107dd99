#include "train/evaluate.h"

#include <stdexcept>

#include "train/batches.h"
#include "train/bits.h"

namespace combiner::train {

Evaluation evaluate(model::ImageTransformer& model,
                    const data::ImageSet& images,
                    int64_t batch_size,
                    bool keep_bits,
                    const Distributed& dist,
                    const EvalProgress& progress) {
  if (images.count == 0) throw std::invalid_argument("evaluate: the split holds no images");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto device = model->parameters().front().device();
  const auto [begin, end] = shard_range(images.count, dist.rank(), dist.world_size());
  std::vector<torch::Tensor> kept;
  double sum_of_image_means = 0.0;  // accumulated in double: 10^4 images x 10^3 subpixels
  for (int64_t first = begin; first < end; first += batch_size) {
    const int64_t count = std::min(batch_size, end - first);
    auto x = image_range(images, first, count).to(device);
    auto bits = model->subpixel_bits(x);
    sum_of_image_means += bits.to(torch::kDouble).mean(1).sum().item<double>();
    if (keep_bits) kept.push_back(bits.cpu());
    if (progress) progress(first + count - begin, end - begin);
  }
  model->train(was_training);

  // The ranks' sums and image counts added up: every image once, whatever the shards.
  auto totals = torch::tensor({sum_of_image_means, double(end - begin)}, torch::kDouble);
  dist.all_reduce_sum(totals);
  Evaluation result;
  result.images = static_cast<int64_t>(totals[1].item<double>());
  result.bits_per_dim = totals[0].item<double>() / totals[1].item<double>();
  if (keep_bits) {
    const int64_t L = images.shape.length();
    auto mine = kept.empty() ? torch::empty({0, L}) : torch::cat(kept, 0);
    if (dist.world_size() == 1) {
      result.bits = mine;
    } else {  // a gather as an all-reduce: each rank fills its rows of zeros
      result.bits = torch::zeros({images.count, L});
      result.bits.slice(0, begin, end).copy_(mine);
      dist.all_reduce_sum(result.bits);
    }
  }
  return result;
}

}  // namespace combiner::train
