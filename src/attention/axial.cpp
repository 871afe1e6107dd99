// Row scores [n, W, W] and column scores [W, n, n] joined in one softmax (axial_common.h).
#include "attention/axial.h"

#include "attention/axial_common.h"
#include "attention/decode.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor AxialAttentionImpl::forward(const torch::Tensor& q,
                                          const torch::Tensor& k,
                                          const torch::Tensor& v) {
  check_inputs(q, k, v);
  // Any L works: the tail is zero-padded to whole rows, and since every output depends only on
  // earlier positions, the padding never reaches the L outputs kept (prefixes while sampling).
  const int64_t L = q.size(2), rows = (L + row_len_ - 1) / row_len_, padded = rows * row_len_;
  const auto dtype = compute_dtype(q);
  const double scale = score_scale(q.size(3));
  auto as_rows = [&](const torch::Tensor& x) {
    return to_rows(pad_length(x.to(dtype), padded), row_len_);
  };
  auto qr = as_rows(q), kr = as_rows(k), vr = as_rows(v);
  auto direct = axial_scores(qr, kr, scale);
  auto w = joint_softmax({direct.row, direct.column});
  auto out = axial_output(w[0], w[1], vr);
  return out.reshape({v.size(0), v.size(1), padded, v.size(3)}).narrow(2, 0, L).to(v.scalar_type());
}

namespace {
class AxialDecode : public DecodeState {
 public:
  AxialDecode(int64_t length, int64_t row_len) : DecodeState(length, false), row_len_(row_len) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    return attend_terms(q, axial_direct(cache(), i, row_len_));
  }
  int64_t row_len_;
};
}  // namespace

std::unique_ptr<DecodeState> AxialAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<AxialDecode>(length, row_len_);
}

}  // namespace combiner::attention
