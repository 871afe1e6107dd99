#include "attention/span_ops.h"

#include <cmath>
#include <limits>

namespace combiner::attention {

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.dim() == 4 &&
                  v.sizes().slice(0, 3) == q.sizes().slice(0, 3),
              "attention: expected q, k [B, H, L, D] and v [B, H, L, Dv], got q ",
              q.sizes(),
              ", k ",
              k.sizes(),
              ", v ",
              v.sizes());
}

torch::ScalarType compute_dtype(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return (t == torch::kHalf || t == torch::kBFloat16) ? torch::kFloat : t;
}

torch::Tensor pad_length(const torch::Tensor& x, int64_t length) {
  const int64_t extra = length - x.size(2);
  if (extra == 0) return x;
  return torch::constant_pad_nd(x, {0, 0, 0, extra});
}

double score_scale(int64_t head_dim) {
  return 1.0 / std::sqrt(double(head_dim));
}

torch::Tensor to_blocks(const torch::Tensor& x, int64_t size) {
  const int64_t n = (x.size(2) + size - 1) / size;
  return pad_length(x, n * size).reshape({x.size(0), x.size(1), n, size, x.size(3)});
}

torch::Tensor shift_one(const torch::Tensor& x, int64_t dim, bool forward) {
  const int64_t n = x.size(dim);
  auto zero = torch::zeros_like(x.narrow(dim, 0, 1));
  if (n == 1) return zero;
  return forward ? torch::cat({zero, x.narrow(dim, 0, n - 1)}, dim)
                 : torch::cat({x.narrow(dim, 1, n - 1), zero}, dim);
}

torch::Tensor masked(const torch::Tensor& scores, const torch::Tensor& allowed) {
  return scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
}

torch::Tensor local_softmax(const torch::Tensor& scores, const torch::Tensor& allowed) {
  // Rows with nothing allowed are left unmasked: finite weights that the caller discards.
  auto empty_row = allowed.logical_not().all(-1, /*keepdim=*/true);
  return torch::softmax(masked(scores, allowed.logical_or(empty_row)), -1);
}

std::vector<torch::Tensor> joint_softmax(const std::vector<torch::Tensor>& scores) {
  std::vector<int64_t> sizes;
  for (const auto& s : scores) sizes.push_back(s.size(-1));
  auto w = torch::softmax(torch::cat(scores, -1), -1);
  auto parts = w.split_with_sizes(sizes, -1);
  return {parts.begin(), parts.end()};
}

torch::Tensor causal_allowed(int64_t n, bool strict, torch::Device device) {
  auto ones = torch::ones({n, n}, torch::dtype(torch::kBool).device(device));
  return strict ? ones.tril(-1) : ones.tril();
}

}  // namespace combiner::attention
