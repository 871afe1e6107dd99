// The transformer one position at a time, for sampling: each layer keeps its attention's
// decode state (attention/decode.h), so a step costs the variant's per-position terms rather
// than a forward pass over the prefix. Logits equal forward()'s at the same position.
#pragma once

#include <torch/torch.h>

#include "attention/decode.h"
#include "model/transformer.h"

#include <memory>
#include <vector>

namespace combiner::model {

class Decoder {
 public:
  // The model must outlive the decoder; call under torch::NoGradGuard in eval mode.
  explicit Decoder(ImageTransformer model);

  // token: [B] integer input at position i = position(): kStartToken at 0, else x_{i-1}.
  // Returns the logits predicting x_i, [B, 256] in float32.
  torch::Tensor step(const torch::Tensor& token);

  int64_t position() const { return position_; }

 private:
  ImageTransformer model_;
  int64_t position_ = 0;
  std::vector<std::unique_ptr<attention::DecodeState>> states_;  // one per block
};

}  // namespace combiner::model
