// `combiner-axial-rowmajor`: direct = the own row up to col(i); spans = every whole earlier row.
// The key of row r is its pooled key; its local expectation seen from column c uses q_(r, c)
// itself, so u[r, c] is q_(r, c)'s unmasked attention over row r ([W x W] per row), and position
// (R, c) weighs u[r, c] for r < R ([n x n] per column).
#include "attention/axial_common.h"
#include "attention/combiner_axial.h"
#include "attention/decode.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor rowmajor_attention(const torch::Tensor& q,
                                 const torch::Tensor& k,
                                 const torch::Tensor& v,
                                 const SpanSummary& summary) {
  const int64_t B = q.size(0), H = q.size(1), n = q.size(2), W = q.size(3), D = q.size(4);
  const double scale = score_scale(D);
  const auto device = q.device();

  auto row_scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // [B, H, n, W, W]
  auto u = torch::matmul(torch::softmax(row_scores, -1), v);        // [B, H, n, W, Dv]
  auto in_row = masked(row_scores, causal_allowed(W, /*strict=*/false, device));

  auto k_row = summary.pool(summary.phi_key(k), 3);  // [B, H, n, D]
  auto spans = torch::matmul(q.reshape({B, H, n * W, D}), k_row.transpose(-2, -1)) * scale;
  spans =
      masked(spans.view({B, H, n, W, n}), causal_allowed(n, /*strict=*/true, device).unsqueeze(1));

  auto w = joint_softmax({in_row, spans});
  return torch::matmul(w[0], v) + column_output(w[1], u);
}

namespace {
// A finished row's pooled key and its W local expectations (one per column's query), computed
// once; position (R, c) attends its row prefix and reads column c of rows < R.
class RowMajorDecode : public AxialPlanDecode {
 public:
  RowMajorDecode(const SpanSummary& summary, int64_t row_len, int64_t rows)
      : summary_(summary), row_len_(row_len), rows_(rows) {}

  void row_finished(const DecodeCache& cache, int64_t row) override {
    auto one_row = [&](const torch::Tensor& x) {
      return DecodeCache::range(x, row * row_len_, (row + 1) * row_len_);  // [B, H, W, *]
    };
    auto q = one_row(cache.q), k = one_row(cache.k), v = one_row(cache.v);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) * score_scale(q.size(3));
    rows_.put(
        row, {summary_.pool(summary_.phi_key(k), 2), torch::matmul(torch::softmax(scores, -1), v)});
  }

  Terms terms(const DecodeCache& cache, int64_t i) const override {
    Terms out;
    const int64_t rows = i / row_len_, col = i % row_len_;
    out.add(DecodeCache::range(cache.k, rows * row_len_, i + 1),
            DecodeCache::range(cache.v, rows * row_len_, i + 1));
    if (rows > 0) out.add(rows_.keys(rows), rows_.values(rows).select(3, col));
    return out;
  }

 private:
  const SpanSummary& summary_;
  int64_t row_len_;
  SpanTable rows_;  // keys [B, H, rows, D], values [B, H, rows, W, Dv]
};
}  // namespace

std::unique_ptr<AxialPlanDecode> rowmajor_decode(const SpanSummary& summary,
                                                 int64_t row_len,
                                                 int64_t rows) {
  return std::make_unique<RowMajorDecode>(summary, row_len, rows);
}

}  // namespace combiner::attention
