// Per level m: the aligned blocks of 2^m positions give pooled keys, pooled queries and local
// expectations [B, H, L/2^m, *]; fenwick_spread hands each position its level-m span.
#include "attention/combiner_logsparse.h"

#include "attention/decode.h"
#include "attention/fenwick.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor CombinerLogSparseAttentionImpl::forward(const torch::Tensor& q,
                                                      const torch::Tensor& k,
                                                      const torch::Tensor& v) {
  check_inputs(q, k, v);
  const auto dtype = compute_dtype(q);
  const int64_t L = q.size(2);
  const double scale = score_scale(q.size(3));
  auto qc = q.to(dtype), kc = k.to(dtype), vc = v.to(dtype);

  std::vector<torch::Tensor> scores = {(qc * kc).sum(-1, /*keepdim=*/true) * scale};
  std::vector<torch::Tensor> values;
  for (int64_t m = 0; m < fenwick_levels(L); ++m) {
    auto qb = fenwick_blocks(qc, m), kb = fenwick_blocks(kc, m), vb = fenwick_blocks(vc, m);
    auto k_span = summary_.pool(summary_.phi_key(kb), 3);    // [B, H, nb, D]
    auto q_span = summary_.pool(summary_.phi_query(qb), 3);  // [B, H, nb, D]
    auto local =
        torch::softmax(torch::matmul(q_span.unsqueeze(3), kb.transpose(-2, -1)) * scale, -1);
    auto u = torch::matmul(local, vb).squeeze(3);  // [B, H, nb, Dv]

    auto k_pos = fenwick_spread(k_span, m, L);
    values.push_back(fenwick_spread(u, m, L));
    scores.push_back(
        masked((qc * k_pos).sum(-1, /*keepdim=*/true) * scale, fenwick_allowed(m, L, q.device())));
  }
  auto w = joint_softmax(scores);
  auto out = w[0] * vc;
  for (size_t m = 0; m < values.size(); ++m) out = out + w[m + 1] * values[m];
  return out.to(v.scalar_type());
}

namespace {
// i itself directly; per level m the current span of 2^m positions, summarised when it first
// appears and kept while it stays i's level-m span (2^m steps), so O(log L) amortised per step.
class CombinerLogSparseDecode : public DecodeState {
 public:
  CombinerLogSparseDecode(int64_t length, const SpanSummary& summary)
      : DecodeState(length, /*keep_queries=*/true),
        summary_(summary),
        levels_(static_cast<size_t>(fenwick_levels(length))) {}

 private:
  struct Level {
    int64_t block = -1;  // index of the summarised block of 2^m positions
    SpanTerm term;
  };

  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    const auto& c = cache();
    Terms terms;
    terms.add(DecodeCache::range(c.k, i, i + 1), DecodeCache::range(c.v, i, i + 1));
    for (int64_t m = 0; (i >> m) > 0; ++m) {
      if (((i >> m) & 1) == 0) continue;
      auto& level = levels_[static_cast<size_t>(m)];
      const int64_t block = (i >> m) - 1;
      if (level.block != block) {
        auto span = [&](const torch::Tensor& x) {
          return DecodeCache::range(x, block << m, (block + 1) << m);
        };
        level = {block, summarize_span(summary_, span(c.q), span(c.k), span(c.v))};
      }
      terms.add(level.term.key.unsqueeze(2), level.term.value.unsqueeze(2));
    }
    return attend_terms(q, terms);
  }
  const SpanSummary& summary_;
  std::vector<Level> levels_;
};
}  // namespace

std::unique_ptr<DecodeState> CombinerLogSparseAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<CombinerLogSparseDecode>(length, summary_);
}

}  // namespace combiner::attention
