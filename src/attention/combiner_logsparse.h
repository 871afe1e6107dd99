// `combiner-logsparse`: direct attention to i itself; the Fenwick spans of [0, i) as spans
// (pooled key, local expectation of the pooled query). O(L log L) time and memory.
#pragma once

#include "attention/attention.h"
#include "attention/summary.h"

namespace combiner::attention {

class CombinerLogSparseAttentionImpl : public AttentionImpl {
 public:
  CombinerLogSparseAttentionImpl(const AttentionOptions& options, int64_t head_dim)
      : summary_(*this, options.abstraction, head_dim, true) {}
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;
  const SpanSummary* span_summary() const override { return &summary_; }

 private:
  SpanSummary summary_;
};

}  // namespace combiner::attention
