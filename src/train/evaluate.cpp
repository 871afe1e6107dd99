#include "train/evaluate.h"

#include <stdexcept>

#include "train/batches.h"
#include "train/bits.h"

namespace combiner::train {

Evaluation evaluate(model::ImageTransformer& model,
                    const data::ImageSet& images,
                    int64_t batch_size,
                    bool keep_bits) {
  if (images.count == 0) throw std::invalid_argument("evaluate: the split holds no images");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  Evaluation result;
  std::vector<torch::Tensor> kept;
  double sum_of_image_means = 0.0;  // accumulated in double: 10^4 images x 10^3 subpixels
  for (int64_t first = 0; first < images.count; first += batch_size) {
    const int64_t count = std::min(batch_size, images.count - first);
    auto x = image_range(images, first, count);
    auto bits = subpixel_bits(model->forward(x), x);
    sum_of_image_means += bits.to(torch::kDouble).mean(1).sum().item<double>();
    if (keep_bits) kept.push_back(bits);
  }
  model->train(was_training);
  result.images = images.count;
  result.bits_per_dim = sum_of_image_means / double(images.count);
  if (keep_bits) result.bits = torch::cat(kept, 0);
  return result;
}

}  // namespace combiner::train
