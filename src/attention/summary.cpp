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

// The inclusive running max along `dim` (from the end when `reverse`) whose backward finds the
// arg-maxes again from x instead of keeping them: torch::cummax saves an int64 index per element
// for its backward (four times a bfloat16 input's bytes, twice a float32 one's), while x is
// usually held anyway (a view of k or q, or a DeepSets map's output that its relu keeps). Ties
// resolve as in the forward (the same op on the same values); each position's gradient is the
// sum of the gradients of the outputs it is the max of, added in float32 or wider.
class CumulativeMax : public torch::autograd::Function<CumulativeMax> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x,
                               int64_t dim,
                               bool reverse) {
    ctx->save_for_backward({x});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reverse"] = reverse;
    if (!reverse) return std::get<0>(torch::cummax(x, dim));
    return std::get<0>(torch::cummax(x.flip(dim), dim)).flip(dim);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const bool reverse = ctx->saved_data["reverse"].toBool();
    const auto in = reverse ? x.flip(dim) : x;
    const auto g = reverse ? grads[0].flip(dim) : grads[0];
    const bool half = g.scalar_type() == torch::kBFloat16 || g.scalar_type() == torch::kHalf;
    const auto acc = half ? torch::kFloat : g.scalar_type();
    auto dx = torch::zeros(in.sizes(), g.options().dtype(acc))
                  .scatter_add_(dim, std::get<1>(torch::cummax(in, dim)), g.to(acc));
    if (reverse) dx = dx.flip(dim);
    return {dx.to(x.scalar_type()), {}, {}};
  }
};
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
  if (max_) return CumulativeMax::apply(x, dim, reverse);
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
