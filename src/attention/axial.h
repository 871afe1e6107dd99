// `axial`: position (r, c) attends its row up to c and its column up to r (row length W).
// O(L (W + L/W)) time and memory.
#pragma once

#include "attention/attention.h"

namespace combiner::attention {

class AxialAttentionImpl : public AttentionImpl {
 public:
  explicit AxialAttentionImpl(int64_t row_len) : row_len_(row_len) {}
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;

 private:
  int64_t row_len_;
};

}  // namespace combiner::attention
