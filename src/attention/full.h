// `full`: dense causal softmax attention, the quality reference. O(L^2) time and memory.
#pragma once

#include "attention/attention.h"

namespace combiner::attention {

class FullAttentionImpl : public AttentionImpl {
 public:
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;
};

}  // namespace combiner::attention
