// `combiner-axial-horizontal`: direct = axial support; for each earlier row r two spans, the
// columns left of col(i) (a prefix of row r) and right of it (a suffix). Their pooled keys and
// queries are exclusive cumulative pools along the row, from the left and from the right; their
// local expectations are [W x W] strictly masked attention per row. Position (R, c) scores the
// spans of rows r < R in column c: [n x n] per column.
#include "attention/axial_common.h"
#include "attention/combiner_axial.h"
#include "attention/decode.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

namespace {
// Span summaries and local expectations of the prefix (left) or suffix (right) of every row,
// indexed by the column that excludes them: [B, H, n, W, D] keys and [B, H, n, W, Dv] values.
std::pair<torch::Tensor, torch::Tensor> side_spans(const torch::Tensor& q,
                                                   const torch::Tensor& k,
                                                   const torch::Tensor& v,
                                                   const SpanSummary& summary,
                                                   bool left,
                                                   double scale) {
  const int64_t W = q.size(3);
  // Inclusive pools from the span's far end, then shifted so column c excludes itself.
  auto k_span = shift_one(summary.cumulative(summary.phi_key(k), 3, !left), 3, left);
  auto q_span = shift_one(summary.cumulative(summary.phi_query(q), 3, !left), 3, left);
  auto before = causal_allowed(W, /*strict=*/true, q.device());  // key c < query c
  auto allowed = left ? before : before.t();
  auto local = local_softmax(torch::matmul(q_span, k.transpose(-2, -1)) * scale, allowed);
  return {k_span, torch::matmul(local, v)};
}

// Scores of (R, c) against the span of row r < R held at column c: [B, H, n(R), W, n(r)].
torch::Tensor span_scores(const torch::Tensor& q,
                          const torch::Tensor& k_span,
                          const torch::Tensor& column_has_span,
                          double scale) {
  const int64_t n = q.size(2);
  auto scores = torch::matmul(q.transpose(2, 3), k_span.transpose(2, 3).transpose(-2, -1));
  auto allowed = causal_allowed(n, /*strict=*/true, q.device()).logical_and(column_has_span);
  return masked(scores * scale, allowed).transpose(2, 3);
}
}  // namespace

torch::Tensor horizontal_attention(const torch::Tensor& q,
                                   const torch::Tensor& k,
                                   const torch::Tensor& v,
                                   const SpanSummary& summary) {
  const int64_t W = q.size(3);
  const double scale = score_scale(q.size(4));
  auto direct = axial_scores(q, k, scale);
  auto [k_left, u_left] = side_spans(q, k, v, summary, /*left=*/true, scale);
  auto [k_right, u_right] = side_spans(q, k, v, summary, /*left=*/false, scale);

  auto column = torch::arange(W, torch::dtype(torch::kLong).device(q.device())).view({W, 1, 1});
  auto left = span_scores(q, k_left, column.gt(0), scale);
  auto right = span_scores(q, k_right, column.lt(W - 1), scale);

  auto w = joint_softmax({direct.row, direct.column, left, right});
  return axial_output(w[0], w[1], v) + column_output(w[2], u_left) + column_output(w[3], u_right);
}

namespace {
// A finished row's left and right spans for every column, computed once with side_spans on
// that single row; position (R, c) reads column c of rows < R.
class HorizontalDecode : public AxialPlanDecode {
 public:
  HorizontalDecode(const SpanSummary& summary, int64_t row_len, int64_t rows)
      : summary_(summary), row_len_(row_len), left_(rows), right_(rows) {}

  void row_finished(const DecodeCache& cache, int64_t row) override {
    auto one_row = [&](const torch::Tensor& x) {
      return DecodeCache::range(x, row * row_len_, (row + 1) * row_len_).unsqueeze(2);
    };
    const double scale = score_scale(cache.q.size(3));
    auto q = one_row(cache.q), k = one_row(cache.k), v = one_row(cache.v);
    for (bool left : {true, false}) {
      auto [key, value] = side_spans(q, k, v, summary_, left, scale);
      (left ? left_ : right_).put(row, {key.squeeze(2), value.squeeze(2)});
    }
  }

  Terms terms(const DecodeCache& cache, int64_t i) const override {
    Terms out = axial_direct(cache, i, row_len_);
    const int64_t rows = i / row_len_, col = i % row_len_;
    if (rows == 0) return out;
    if (col > 0) out.add(left_.keys(rows).select(3, col), left_.values(rows).select(3, col));
    if (col < row_len_ - 1)
      out.add(right_.keys(rows).select(3, col), right_.values(rows).select(3, col));
    return out;
  }

 private:
  const SpanSummary& summary_;
  int64_t row_len_;
  SpanTable left_, right_;  // [B, H, rows, W, *], indexed by the column that excludes them
};
}  // namespace

std::unique_ptr<AxialPlanDecode> horizontal_decode(const SpanSummary& summary,
                                                   int64_t row_len,
                                                   int64_t rows) {
  return std::make_unique<HorizontalDecode>(summary, row_len, rows);
}

}  // namespace combiner::attention
