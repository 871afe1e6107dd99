// `combiner-fixed`: direct attention inside the own block of s positions, every earlier whole
// block seen as one span (pooled key, local expectation of the pooled query). O(L (s + L/s)).
#pragma once

#include "attention/attention.h"
#include "attention/summary.h"

namespace combiner::attention {

class CombinerFixedAttentionImpl : public AttentionImpl {
 public:
  CombinerFixedAttentionImpl(const AttentionOptions& options, int64_t head_dim)
      : block_(options.block), summary_(*this, options.abstraction, head_dim, true) {}
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;
  const SpanSummary* span_summary() const override { return &summary_; }
  bool has_fused_kernel() const override { return true; }

 private:
  torch::Tensor composed(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

  int64_t block_;
  SpanSummary summary_;
};

}  // namespace combiner::attention
