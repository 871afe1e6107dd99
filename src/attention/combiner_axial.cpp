// The module behind the four axial Combiner names: casts to the compute dtype, views the
// sequence as rows and runs the chosen computation; `combiner-mixture` averages two of them.
#include "attention/combiner_axial.h"

#include "attention/axial_common.h"
#include "attention/span_ops.h"

namespace combiner::attention {

CombinerAxialAttentionImpl::CombinerAxialAttentionImpl(const AttentionOptions& options,
                                                       int64_t head_dim)
    : plan_(options.type == "combiner-axial-vertical"     ? Plan::kVertical
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

}  // namespace combiner::attention
