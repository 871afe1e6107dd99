// `combiner-axial-vertical`: direct = axial support; spans = each other column above the current
// row. Span "column c, rows < R" is a prefix of column c, so its pooled key and query are an
// inclusive cumulative pool down the column read at row R - 1, and its local expectation is the
// cumulative query's causal attention down the column: [n x n] per column.
#include "attention/axial_common.h"
#include "attention/combiner_axial.h"
#include "attention/decode.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor vertical_attention(const torch::Tensor& q,
                                 const torch::Tensor& k,
                                 const torch::Tensor& v,
                                 const SpanSummary& summary) {
  const int64_t n = q.size(2), W = q.size(3);
  const double scale = score_scale(q.size(4));
  const auto device = q.device();
  auto direct = axial_scores(q, k, scale);

  // Row t of the cumulative tensors summarises column c rows 0..t.
  auto k_cum = summary.cumulative(summary.phi_key(k), 2, /*reverse=*/false);    // [B,H,n,W,D]
  auto q_cum = summary.cumulative(summary.phi_query(q), 2, /*reverse=*/false);  // [B,H,n,W,D]
  auto local = torch::matmul(q_cum.transpose(2, 3), k.transpose(2, 3).transpose(-2, -1)) * scale;
  local = torch::softmax(masked(local, causal_allowed(n, /*strict=*/false, device)), -1);
  auto u = torch::matmul(local, v.transpose(2, 3)).transpose(2, 3);  // [B, H, n, W, Dv]

  // Position (R, c') sees span (R - 1, c) for c != c' when R > 0: shift down one row.
  auto k_span = shift_one(k_cum, 2, /*forward=*/true);
  auto u_span = shift_one(u, 2, /*forward=*/true);
  auto other_column = torch::eye(W, torch::dtype(torch::kBool).device(device)).logical_not();
  auto has_rows_above =
      torch::arange(n, torch::dtype(torch::kLong).device(device)).ge(1).view({n, 1, 1});
  auto spans = masked(torch::matmul(q, k_span.transpose(-2, -1)) * scale,
                      other_column.logical_and(has_rows_above));  // [B, H, n, W, W]

  auto w = joint_softmax({direct.row, direct.column, spans});
  return axial_output(w[0], w[1], v) + torch::matmul(w[2], u_span);
}

namespace {
// When row r is finished, every column's span "rows 0..r" is summarised afresh (its pooled query
// changes as it grows): O(r W D) once per row, O(L/W D) per step amortised.
class VerticalDecode : public AxialPlanDecode {
 public:
  VerticalDecode(const SpanSummary& summary, int64_t row_len)
      : summary_(summary), row_len_(row_len) {}

  void row_finished(const DecodeCache& cache, int64_t row) override {
    auto columns = [&](const torch::Tensor& x) {
      return DecodeCache::rows(x, row + 1, row_len_).transpose(2, 3);  // [B, H, W, rows, *]
    };
    columns_ = summarize_span(summary_, columns(cache.q), columns(cache.k), columns(cache.v));
  }

  Terms terms(const DecodeCache& cache, int64_t i) const override {
    Terms out = axial_direct(cache, i, row_len_);
    if (i < row_len_) return out;
    const int64_t col = i % row_len_;  // every other column's span: those before, those after
    if (col > 0) out.add(columns_.key.narrow(2, 0, col), columns_.value.narrow(2, 0, col));
    if (col < row_len_ - 1)
      out.add(columns_.key.narrow(2, col + 1, row_len_ - col - 1),
              columns_.value.narrow(2, col + 1, row_len_ - col - 1));
    return out;
  }

 private:
  const SpanSummary& summary_;
  int64_t row_len_;
  SpanTerm columns_;  // [B, H, W, *]: column c over the finished rows
};
}  // namespace

std::unique_ptr<AxialPlanDecode> vertical_decode(const SpanSummary& summary, int64_t row_len) {
  return std::make_unique<VerticalDecode>(summary, row_len);
}

}  // namespace combiner::attention
