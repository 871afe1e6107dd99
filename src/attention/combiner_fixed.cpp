// Blocked layout [B, H, n, s, *] as in fixed.cpp; the per-block summaries [B, H, n, *] are
// scored by every query ([L x n], masked to blocks before the query's own).
#include "attention/combiner_fixed.h"

#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor CombinerFixedAttentionImpl::forward(const torch::Tensor& q,
                                                  const torch::Tensor& k,
                                                  const torch::Tensor& v) {
  check_inputs(q, k, v);
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

}  // namespace combiner::attention
