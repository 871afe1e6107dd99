#include "attention/full.h"

#include <cmath>
#include <limits>

namespace combiner::attention {

torch::Tensor FullAttentionImpl::forward(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v) {
  const int64_t L = q.size(2);
  const int64_t D = q.size(3);
  // Scores and softmax in fp32 whatever the input dtype; the mask is built once per call.
  auto scores = torch::matmul(q, k.transpose(-2, -1)).to(torch::kFloat) / std::sqrt(double(D));
  auto future = torch::ones({L, L}, torch::dtype(torch::kBool).device(q.device())).triu(1);
  scores.masked_fill_(future, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1).to(v.scalar_type()), v);
}

}  // namespace combiner::attention
