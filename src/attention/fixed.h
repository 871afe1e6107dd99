// `fixed`: Sparse Transformer "fixed" pattern. Position i attends causally inside its block of
// s positions and to the last position of every earlier block. O(L (s + L/s)) time and memory.
#pragma once

#include "attention/attention.h"

namespace combiner::attention {

class FixedAttentionImpl : public AttentionImpl {
 public:
  explicit FixedAttentionImpl(int64_t block) : block_(block) {}
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;

 private:
  int64_t block_;
};

}  // namespace combiner::attention
