// Blocked layout [B, H, n, s, *] as in fixed.cpp; the per-block summaries [B, H, n, *] are
// scored by every query ([L x n], masked to blocks before the query's own).
#include "attention/combiner_fixed.h"

#include "attention/decode.h"
#include "attention/fused/fused.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor CombinerFixedAttentionImpl::forward(const torch::Tensor& q,
                                                  const torch::Tensor& k,
                                                  const torch::Tensor& v) {
  check_inputs(q, k, v);
  if (use_fused("combiner-fixed", q, v)) return fused_combiner_fixed(q, k, v, summary_, block_);
  return composed(q, k, v);
}

torch::Tensor CombinerFixedAttentionImpl::composed(const torch::Tensor& q,
                                                   const torch::Tensor& k,
                                                   const torch::Tensor& v) {
  const auto dtype = compute_dtype(q);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), Dv = v.size(3);
  const int64_t s = block_, n = (L + s - 1) / s;
  const double scale = score_scale(D);
  const auto device = q.device();

  auto qb = to_blocks(q.to(dtype), s), kb = to_blocks(k.to(dtype), s),
       vb = to_blocks(v.to(dtype), s);
  auto kb_t = kb.transpose(-2, -1);

  auto in_block =
      masked(torch::matmul(qb, kb_t) * scale, causal_allowed(s, /*strict=*/false, device));

  // One span per block: pooled key and query, and the pooled query's attention over the block.
  auto k_span = summary_.pool(summary_.phi_key(kb), 3);    // [B, H, n, D]
  auto q_span = summary_.pool(summary_.phi_query(qb), 3);  // [B, H, n, D]
  auto local = torch::softmax(torch::matmul(q_span.unsqueeze(3), kb_t) * scale, -1);
  auto u = torch::matmul(local, vb).squeeze(3);  // [B, H, n, Dv]

  auto spans = torch::matmul(qb.reshape({B, H, n * s, D}), k_span.transpose(-2, -1)) * scale;
  spans =
      masked(spans.view({B, H, n, s, n}), causal_allowed(n, /*strict=*/true, device).unsqueeze(1));

  auto w = joint_softmax({in_block, spans});
  auto out = torch::matmul(w[0], vb) +
             torch::matmul(w[1].reshape({B, H, n * s, n}), u).view({B, H, n, s, Dv});
  return out.view({B, H, n * s, Dv}).narrow(2, 0, L).to(v.scalar_type());
}

namespace {
// The own block up to i directly; block b's summary is computed when block b + 1 starts.
class CombinerFixedDecode : public DecodeState {
 public:
  CombinerFixedDecode(int64_t length, int64_t block, const SpanSummary& summary)
      : DecodeState(length, /*keep_queries=*/true),
        block_(block),
        summary_(summary),
        spans_((length + block - 1) / block) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    const int64_t blocks = i / block_, begin = blocks * block_;
    const auto& c = cache();
    if (blocks > 0 && i == begin) {
      auto span = [&](const torch::Tensor& x) {
        return DecodeCache::range(x, begin - block_, begin);
      };
      spans_.put(blocks - 1, summarize_span(summary_, span(c.q), span(c.k), span(c.v)));
    }
    Terms terms;
    terms.add(DecodeCache::range(c.k, begin, i + 1), DecodeCache::range(c.v, begin, i + 1));
    if (blocks > 0) terms.add(spans_.keys(blocks), spans_.values(blocks));
    return attend_terms(q, terms);
  }
  int64_t block_;
  const SpanSummary& summary_;
  SpanTable spans_;
};
}  // namespace

std::unique_ptr<DecodeState> CombinerFixedAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<CombinerFixedDecode>(length, block_, summary_);
}

}  // namespace combiner::attention
