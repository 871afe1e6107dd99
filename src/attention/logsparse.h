// `logsparse`: position i attends itself and the last position of each Fenwick span of [0, i).
// O(L log L) time and memory.
#pragma once

#include "attention/attention.h"

namespace combiner::attention {

class LogSparseAttentionImpl : public AttentionImpl {
 public:
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;
};

}  // namespace combiner::attention
