#include "attention/axial_common.h"

#include "attention/span_ops.h"

namespace combiner::attention {

torch::Tensor to_rows(const torch::Tensor& x, int64_t row_len) {
  return x.reshape({x.size(0), x.size(1), x.size(2) / row_len, row_len, x.size(3)});
}

AxialScores axial_scores(const torch::Tensor& q, const torch::Tensor& k, double scale) {
  const int64_t n = q.size(2), W = q.size(3);
  const auto device = q.device();
  auto row = masked(torch::matmul(q, k.transpose(-2, -1)) * scale,
                    causal_allowed(W, /*strict=*/false, device));
  // Column scores per column: [B, H, W, n, n], strictly earlier rows (i itself is in `row`).
  auto qc = q.transpose(2, 3), kc = k.transpose(2, 3);
  auto column = masked(torch::matmul(qc, kc.transpose(-2, -1)) * scale,
                       causal_allowed(n, /*strict=*/true, device));
  return {row, column.transpose(2, 3)};
}

torch::Tensor column_output(const torch::Tensor& w_rows_layout, const torch::Tensor& values) {
  return torch::matmul(w_rows_layout.transpose(2, 3), values.transpose(2, 3)).transpose(2, 3);
}

torch::Tensor axial_output(const torch::Tensor& w_row,
                           const torch::Tensor& w_column,
                           const torch::Tensor& v) {
  return torch::matmul(w_row, v) + column_output(w_column, v);
}

}  // namespace combiner::attention
