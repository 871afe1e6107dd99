#include "attention/heads.h"

namespace combiner::attention {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// [B, L, 3, H, D] laid out contiguously, as views [B, H, L, D] of its part `i`.
torch::Tensor part(const torch::Tensor& packed, int64_t i) {
  return packed.select(2, i).transpose(1, 2);
}

class SplitHeads : public torch::autograd::Function<SplitHeads> {
 public:
  static tensor_list forward(AutogradContext* ctx, const torch::Tensor& qkv, int64_t heads) {
    const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (3 * heads);
    const auto packed = qkv.view({B, L, 3, heads, D});
    ctx->saved_data["sizes"] = std::vector<int64_t>{B, L, 3 * heads * D};
    return {part(packed, 0), part(packed, 1), part(packed, 2)};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto& any = grads[0].defined() ? grads[0] : grads[1].defined() ? grads[1] : grads[2];
    if (!any.defined()) return {torch::Tensor(), torch::Tensor()};
    const auto packed = packed_parts(grads[0], grads[1], grads[2]);
    if (packed.defined()) return {packed.view(sizes), torch::Tensor()};
    std::vector<torch::Tensor> parts;
    for (const auto& g : grads)
      parts.push_back((g.defined() ? g : torch::zeros_like(any)).transpose(1, 2));
    return {torch::stack(parts, 2).view(sizes), torch::Tensor()};
  }
};

}  // namespace

std::array<torch::Tensor, 3> split_heads(const torch::Tensor& qkv, int64_t heads) {
  TORCH_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
              "split_heads: qkv must be [B, L, 3 x heads x D], got ",
              qkv.sizes(),
              " for ",
              heads,
              " heads");
  const auto out = SplitHeads::apply(qkv, heads);
  return {out[0], out[1], out[2]};
}

torch::Tensor packed_parts(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined() || q.dim() != 4) return {};
  if (k.sizes() != q.sizes() || v.sizes() != q.sizes() || k.strides() != q.strides() ||
      v.strides() != q.strides() || k.dtype() != q.dtype() || v.dtype() != q.dtype() ||
      k.device() != q.device() || v.device() != q.device())
    return {};
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), HD = H * D;
  const int64_t want[4] = {L * 3 * HD, D, 3 * HD, 1};
  for (int d = 0; d < 4; ++d)
    if (q.size(d) != 1 && q.stride(d) != want[d]) return {};
  if (!q.storage().is_alias_of(k.storage()) || !q.storage().is_alias_of(v.storage()) ||
      k.storage_offset() != q.storage_offset() + HD ||
      v.storage_offset() != q.storage_offset() + 2 * HD)
    return {};
  const auto end = (q.storage_offset() + B * L * 3 * HD) * int64_t(q.element_size());
  if (end > int64_t(q.storage().nbytes())) return {};
  return q.as_strided({B, L, 3, H, D}, {L * 3 * HD, 3 * HD, HD, D, 1});
}

std::array<torch::Tensor, 3> new_packed_parts(const torch::Tensor& q) {
  const auto packed = torch::empty({q.size(0), q.size(2), 3, q.size(1), q.size(3)}, q.options());
  return {part(packed, 0), part(packed, 1), part(packed, 2)};
}

}  // namespace combiner::attention
