// One score column per Fenwick level, [B, H, L, 1 + levels], with -inf where the level's bit is
// clear; the keys and values of each level reach positions through fenwick_spread.
#include "attention/logsparse.h"

#include "attention/decode.h"
#include "attention/fenwick.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor LogSparseAttentionImpl::forward(const torch::Tensor& q,
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
    const int64_t last = (int64_t(1) << m) - 1;
    auto k_last = fenwick_spread(fenwick_blocks(kc, m).select(3, last), m, L);
    values.push_back(fenwick_spread(fenwick_blocks(vc, m).select(3, last), m, L));
    scores.push_back(
        masked((qc * k_last).sum(-1, /*keepdim=*/true) * scale, fenwick_allowed(m, L, q.device())));
  }
  auto w = joint_softmax(scores);
  auto out = w[0] * vc;
  for (size_t m = 0; m < values.size(); ++m) out = out + w[m + 1] * values[m];
  return out.to(v.scalar_type());
}

namespace {
// i itself and the last position of each of its Fenwick spans: O(log i) gathered rows.
class LogSparseDecode : public DecodeState {
 public:
  explicit LogSparseDecode(int64_t length) : DecodeState(length, false) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    std::vector<int64_t> positions = {i};
    for (int64_t m = 0; (i >> m) > 0; ++m)
      if ((i >> m) & 1) positions.push_back(((i >> m) << m) - 1);
    auto index = torch::tensor(positions, torch::dtype(torch::kLong).device(q.device()));
    Terms terms;
    terms.add(cache().k.index_select(2, index), cache().v.index_select(2, index));
    return attend_terms(q, terms);
  }
};
}  // namespace

std::unique_ptr<DecodeState> LogSparseAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<LogSparseDecode>(length);
}

}  // namespace combiner::attention
