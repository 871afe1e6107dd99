// Scores and softmax in the compute dtype (fp32 for half/bf16 inputs); the mask is built per call.
#include "attention/full.h"

#include "attention/decode.h"
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

namespace {
// Every earlier key and value: O(i) per step, as full attention is.
class FullDecode : public DecodeState {
 public:
  explicit FullDecode(int64_t length) : DecodeState(length, /*keep_queries=*/false) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    Terms terms;
    terms.add(DecodeCache::range(cache().k, 0, i + 1), DecodeCache::range(cache().v, 0, i + 1));
    return attend_terms(q, terms);
  }
};
}  // namespace

std::unique_ptr<DecodeState> FullAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<FullDecode>(length);
}

}  // namespace combiner::attention
