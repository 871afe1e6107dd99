// Bits per dimension, defined once: for each image, the mean over its L subpixels of
// -log2 p(x_i | x_<i); a split's bits/dim is the mean of that over every image in it.
#pragma once

#include <torch/torch.h>

namespace combiner::train {

// logits [B, L, 256] (float), x [B, L] integer subpixels -> bits [B, L] (float32).
torch::Tensor subpixel_bits(const torch::Tensor& logits, const torch::Tensor& x);

// The training loss: mean bits over the batch (differentiable scalar).
torch::Tensor mean_bits(const torch::Tensor& logits, const torch::Tensor& x);

// The backward of one micro-batch's `loss` out of `count`, scaled by 1 / count, and its share of
// the step's loss added to `bits` ([1] double on the loss's device, made by the first). With one
// micro-batch nothing is divided: a division by 1 is exact, and would cost launches.
void backward_share(const torch::Tensor& loss, int64_t count, torch::Tensor& bits);

}  // namespace combiner::train
