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

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The Function behind cumulative_max. Saved for backward: the int64 arg-maxes of torch::cummax
// (keep_indices), or x itself, from which backward finds them again (ties resolve as in the
// forward: the same op on the same values). Each position's gradient is the sum of the gradients
// of the outputs it is the max of, added in float32 or wider.
class CumulativeMax : public torch::autograd::Function<CumulativeMax> {
 public:
  static constexpr int64_t kBackwardPieces = 8;

  static torch::Tensor forward(
      AutogradContext* ctx, const torch::Tensor& x, int64_t dim, bool reverse, bool keep_indices) {
    auto [values, indices] = torch::cummax(reverse ? x.flip(dim) : x, dim);
    ctx->save_for_backward({keep_indices ? indices : x});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["kept"] = keep_indices;
    return reverse ? values.flip(dim) : values;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const bool kept = ctx->saved_data["kept"].toBool();
    const auto& g = grads[0];
    const bool half = g.scalar_type() == torch::kBFloat16 || g.scalar_type() == torch::kHalf;
    const auto acc = half ? torch::kFloat : g.scalar_type();
    // Found again, the arg-maxes (int64) and the float32 sums are made a slice at a time, along
    // the largest axis before `dim`: a fraction of x's bytes at once, not 8 + 8 per element.
    int64_t axis = -1;
    for (int64_t a = 0; a < dim; ++a)
      if (axis < 0 || g.size(a) > g.size(axis)) axis = a;
    const int64_t pieces = kept || axis < 0 ? 1 : std::min<int64_t>(kBackwardPieces, g.size(axis));
    auto dx = torch::empty(g.sizes(), g.options());
    const int64_t n = pieces == 1 ? 1 : g.size(axis), step = (n + pieces - 1) / pieces;
    for (int64_t start = 0; start < n; start += step) {
      auto part = [&](const torch::Tensor& t) {
        return pieces == 1 ? t : t.narrow(axis, start, std::min(step, n - start));
      };
      auto flipped = [&](const torch::Tensor& t) { return reverse ? t.flip(dim) : t; };
      const auto at = kept ? part(saved) : std::get<1>(torch::cummax(flipped(part(saved)), dim));
      const auto gi = flipped(part(g)).to(acc);
      part(dx).copy_(flipped(torch::zeros_like(gi).scatter_add_(dim, at, gi)));
    }
    return {dx, {}, {}, {}};
  }
};
}  // namespace

torch::Tensor cumulative_max(const torch::Tensor& x, int64_t dim, bool reverse, bool keep_indices) {
  return CumulativeMax::apply(x, dim, reverse, keep_indices);
}

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

torch::Tensor SpanSummary::cumulative(const torch::Tensor& x,
                                      int64_t dim,
                                      bool reverse,
                                      bool keep_indices) const {
  if (max_) return cumulative_max(x, dim, reverse, keep_indices);
  auto in = reverse ? x.flip(dim) : x;
  torch::Tensor out;
  {
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
