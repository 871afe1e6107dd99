// The axial Combiner variants (row length W; see docs/ATTENTION.md for their spans):
// `combiner-axial-vertical`, `combiner-axial-horizontal`, `combiner-axial-rowmajor` and
// `combiner-mixture` (the average of vertical and horizontal). All O(L (W + L/W)).
#pragma once

#include "attention/attention.h"
#include "attention/decode.h"
#include "attention/summary.h"

namespace combiner::attention {

// The plain computations, q, k: [B, H, n, W, D], v: [B, H, n, W, Dv] in the compute dtype
// -> [B, H, n, W, Dv]. One file each: combiner_axial_{vertical,horizontal,rowmajor}.cpp.
torch::Tensor vertical_attention(const torch::Tensor& q,
                                 const torch::Tensor& k,
                                 const torch::Tensor& v,
                                 const SpanSummary& summary);
torch::Tensor horizontal_attention(const torch::Tensor& q,
                                   const torch::Tensor& k,
                                   const torch::Tensor& v,
                                   const SpanSummary& summary);
torch::Tensor rowmajor_attention(const torch::Tensor& q,
                                 const torch::Tensor& k,
                                 const torch::Tensor& v,
                                 const SpanSummary& summary);

// Incremental decoding of one plan (in the plan's file). row_finished(r) runs once row r is in
// the cache, before the first position of row r + 1; terms(i) are all the terms i attends.
class AxialPlanDecode {
 public:
  virtual ~AxialPlanDecode() = default;
  virtual void row_finished(const DecodeCache& cache, int64_t row) = 0;
  virtual Terms terms(const DecodeCache& cache, int64_t i) const = 0;
};
std::unique_ptr<AxialPlanDecode> vertical_decode(const SpanSummary& summary, int64_t row_len);
std::unique_ptr<AxialPlanDecode> horizontal_decode(const SpanSummary& summary,
                                                   int64_t row_len,
                                                   int64_t rows);
std::unique_ptr<AxialPlanDecode> rowmajor_decode(const SpanSummary& summary,
                                                 int64_t row_len,
                                                 int64_t rows);

// One module type for the four names: the variant picks the computation above.
class CombinerAxialAttentionImpl : public AttentionImpl {
 public:
  CombinerAxialAttentionImpl(const AttentionOptions& options, int64_t head_dim);
  torch::Tensor forward(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) override;
  std::unique_ptr<DecodeState> start_decoding(int64_t length) const override;
  const SpanSummary* span_summary() const override { return &summary_; }
  bool has_fused_kernel() const override { return true; }

 private:
  enum class Plan { kVertical, kHorizontal, kRowMajor, kMixture };
  torch::Tensor forward_fused(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v) const;
  std::string type_;
  Plan plan_;
  int64_t row_len_;
  SpanSummary summary_;
};

}  // namespace combiner::attention
