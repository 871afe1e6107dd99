// The module behind the four axial Combiner names: casts to the compute dtype, views the
// sequence as rows and runs the chosen computation; `combiner-mixture` averages two of them.
#include "attention/combiner_axial.h"

#include "attention/axial_common.h"
#include "attention/decode.h"
#include "attention/fused/fused.h"
#include "attention/span_ops.h"

namespace combiner::attention {

CombinerAxialAttentionImpl::CombinerAxialAttentionImpl(const AttentionOptions& options,
                                                       int64_t head_dim)
    : type_(options.type),
      plan_(options.type == "combiner-axial-vertical"     ? Plan::kVertical
            : options.type == "combiner-axial-horizontal" ? Plan::kHorizontal
            : options.type == "combiner-axial-rowmajor"   ? Plan::kRowMajor
                                                          : Plan::kMixture),
      row_len_(options.row_len),
      // rowmajor's local query is q itself, so it has no learned query map.
      summary_(*this, options.abstraction, head_dim, options.type != "combiner-axial-rowmajor") {}

torch::Tensor CombinerAxialAttentionImpl::forward(const torch::Tensor& q,
                                                  const torch::Tensor& k,
                                                  const torch::Tensor& v) {
  check_inputs(q, k, v);
  if (use_fused(type_, q, v)) return forward_fused(q, k, v);
  // Any L works: the tail is zero-padded to whole rows, and since every output depends only on
  // earlier positions, the padding never reaches the L outputs kept (prefixes while sampling).
  const int64_t L = q.size(2), rows = (L + row_len_ - 1) / row_len_, padded = rows * row_len_;
  const auto dtype = compute_dtype(q);
  auto as_rows = [&](const torch::Tensor& x) {
    return to_rows(pad_length(x.to(dtype), padded), row_len_);
  };
  auto qr = as_rows(q), kr = as_rows(k), vr = as_rows(v);
  torch::Tensor out;
  switch (plan_) {
    case Plan::kVertical:
      out = vertical_attention(qr, kr, vr, summary_);
      break;
    case Plan::kHorizontal:
      out = horizontal_attention(qr, kr, vr, summary_);
      break;
    case Plan::kRowMajor:
      out = rowmajor_attention(qr, kr, vr, summary_);
      break;
    case Plan::kMixture:
      out = 0.5 *
            (vertical_attention(qr, kr, vr, summary_) + horizontal_attention(qr, kr, vr, summary_));
      break;
  }
  return out.reshape({v.size(0), v.size(1), padded, v.size(3)}).narrow(2, 0, L).to(v.scalar_type());
}

torch::Tensor CombinerAxialAttentionImpl::forward_fused(const torch::Tensor& q,
                                                        const torch::Tensor& k,
                                                        const torch::Tensor& v) const {
  switch (plan_) {
    case Plan::kVertical:
      return fused_combiner_vertical(q, k, v, summary_, row_len_);
    case Plan::kHorizontal:
      return fused_combiner_horizontal(q, k, v, summary_, row_len_);
    case Plan::kRowMajor:
      return fused_combiner_rowmajor(q, k, v, summary_, row_len_);
    case Plan::kMixture:
      break;
  }
  return fused_combiner_mixture(q, k, v, summary_, row_len_);
}

namespace {
// The cache and the row clock shared by the plans; combiner-mixture averages its two plans.
class CombinerAxialDecode : public DecodeState {
 public:
  CombinerAxialDecode(int64_t length,
                      int64_t row_len,
                      std::vector<std::unique_ptr<AxialPlanDecode>> plans)
      : DecodeState(length, /*keep_queries=*/true), row_len_(row_len), plans_(std::move(plans)) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    if (i > 0 && i % row_len_ == 0)
      for (auto& plan : plans_) plan->row_finished(cache(), i / row_len_ - 1);
    torch::Tensor out;
    for (const auto& plan : plans_) {
      auto o = attend_terms(q, plan->terms(cache(), i));
      out = out.defined() ? out + o : o;
    }
    return plans_.size() == 1 ? out : out / double(plans_.size());
  }
  int64_t row_len_;
  std::vector<std::unique_ptr<AxialPlanDecode>> plans_;
};
}  // namespace

std::unique_ptr<DecodeState> CombinerAxialAttentionImpl::start_decoding(int64_t length) const {
  const int64_t rows = (length + row_len_ - 1) / row_len_;
  std::vector<std::unique_ptr<AxialPlanDecode>> plans;
  if (plan_ == Plan::kVertical || plan_ == Plan::kMixture)
    plans.push_back(vertical_decode(summary_, row_len_));
  if (plan_ == Plan::kHorizontal || plan_ == Plan::kMixture)
    plans.push_back(horizontal_decode(summary_, row_len_, rows));
  if (plan_ == Plan::kRowMajor) plans.push_back(rowmajor_decode(summary_, row_len_, rows));
  return std::make_unique<CombinerAxialDecode>(length, row_len_, std::move(plans));
}

}  // namespace combiner::attention
