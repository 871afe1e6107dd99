#include "attention/summary.h"

#include <cmath>

namespace combiner::attention {

namespace {
torch::Tensor phi(const torch::Tensor& w, const torch::Tensor& x) {
  if (!w.defined()) return x;
  return torch::relu(torch::matmul(x, w.to(x.scalar_type()).t()));
}
torch::Tensor learned_map(int64_t D) {
  return torch::randn({D, D}) / std::sqrt(double(D));
}
}  // namespace

SpanSummary::SpanSummary(torch::nn::Module& owner,
                         const std::string& abstraction,
                         int64_t head_dim,
                         bool with_query) {
  max_ = abstraction == "max" || abstraction == "deepsets-max";
  if (abstraction.rfind("deepsets-", 0) == 0) {
    if (with_query) w_query_ = owner.register_parameter("phi_query", learned_map(head_dim));
    w_key_ = owner.register_parameter("phi_key", learned_map(head_dim));
  }
}

torch::Tensor SpanSummary::phi_query(const torch::Tensor& x) const {
  return phi(w_query_, x);
}
torch::Tensor SpanSummary::phi_key(const torch::Tensor& x) const {
  return phi(w_key_, x);
}

torch::Tensor SpanSummary::pool(const torch::Tensor& x, int64_t dim) const {
  return max_ ? std::get<0>(x.max(dim)) : x.mean(dim);
}

torch::Tensor SpanSummary::cumulative(const torch::Tensor& x, int64_t dim, bool reverse) const {
  auto in = reverse ? x.flip(dim) : x;
  torch::Tensor out;
  if (max_) {
    out = std::get<0>(torch::cummax(in, dim));
  } else {
    // Running mean: prefix sums divided by the prefix lengths 1..n, broadcast along `dim`.
    const int64_t n = in.size(dim);
    std::vector<int64_t> shape(in.dim(), 1);
    shape[dim < 0 ? dim + in.dim() : dim] = n;
    auto counts = torch::arange(1, n + 1, in.options()).view(shape);
    out = in.cumsum(dim) / counts;
  }
  return reverse ? out.flip(dim) : out;
}

}  // namespace combiner::attention
