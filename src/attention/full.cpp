// Scores and softmax in the compute dtype (fp32 for half/bf16 inputs); the mask is built per call.
#include "attention/full.h"

#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor FullAttentionImpl::forward(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v) {
  check_inputs(q, k, v);
  const auto dtype = compute_dtype(q);
  const int64_t L = q.size(2);
  const double scale = score_scale(q.size(3));
  auto scores = torch::matmul(q.to(dtype), k.to(dtype).transpose(-2, -1)) * scale;
  scores = masked(scores, causal_allowed(L, /*strict=*/false, q.device()));
  return torch::matmul(torch::softmax(scores, -1), v.to(dtype)).to(v.scalar_type());
}

}  // namespace combiner::attention
