// Blocked layout: L is zero-padded to n*s and viewed as [B, H, n, s, *]. The padded tail only
// ever meets padded queries, which are cut off at the end.
#include "attention/fixed.h"

#include "attention/decode.h"
#include "attention/span_ops.h"

#include <cmath>

namespace combiner::attention {

torch::Tensor FixedAttentionImpl::forward(const torch::Tensor& q,
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

  // Inside the block: [s x s] causal. Earlier blocks: their last position, [L x n].
  auto in_block = masked(torch::matmul(qb, kb.transpose(-2, -1)) * scale,
                         causal_allowed(s, /*strict=*/false, device));
  auto k_last = kb.select(3, s - 1);  // [B, H, n, D]
  auto v_last = vb.select(3, s - 1);  // [B, H, n, Dv]
  auto columns = torch::matmul(qb.reshape({B, H, n * s, D}), k_last.transpose(-2, -1)) * scale;
  columns = masked(columns.view({B, H, n, s, n}),
                   causal_allowed(n, /*strict=*/true, device).unsqueeze(1));

  auto w = joint_softmax({in_block, columns});
  auto out = torch::matmul(w[0], vb) +
             torch::matmul(w[1].reshape({B, H, n * s, n}), v_last).view({B, H, n, s, Dv});
  return out.view({B, H, n * s, Dv}).narrow(2, 0, L).to(v.scalar_type());
}

namespace {
// The own block up to i, and the last position of every earlier block (strided views).
class FixedDecode : public DecodeState {
 public:
  FixedDecode(int64_t length, int64_t block) : DecodeState(length, false), block_(block) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    const int64_t blocks = i / block_, begin = blocks * block_;
    Terms terms;
    if (blocks > 0)
      terms.add(DecodeCache::rows(cache().k, blocks, block_).select(3, block_ - 1),
                DecodeCache::rows(cache().v, blocks, block_).select(3, block_ - 1));
    terms.add(DecodeCache::range(cache().k, begin, i + 1),
              DecodeCache::range(cache().v, begin, i + 1));
    return attend_terms(q, terms);
  }
  int64_t block_;
};
}  // namespace

std::unique_ptr<DecodeState> FixedAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<FixedDecode>(length, block_);
}

}  // namespace combiner::attention
