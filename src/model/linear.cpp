#include "model/linear.h"

#include <cmath>

#include "model/precision.h"
#include "ops/linear.h"

namespace combiner::model {

LinearImpl::LinearImpl(int64_t in, int64_t out) {
  // torch::nn::Linear's initialisation: U(-1/sqrt(in), 1/sqrt(in)) for both.
  const double bound = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", torch::empty({out, in}).uniform_(-bound, bound));
  bias = register_parameter("bias", torch::empty({out}).uniform_(-bound, bound));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  return run(x, false);
}

torch::Tensor LinearImpl::forward_gelu(const torch::Tensor& x) {
  return run(x, true);
}

torch::Tensor LinearImpl::run(const torch::Tensor& x, bool gelu) {
  const bool fused = path_ == Path::kFused || (path_ == Path::kAuto && x.is_cuda());
  if (fused && torch::GradMode::is_enabled() && bias.requires_grad() &&
      ops::fused_linear_unsupported(x, weight, bias).empty())
    return ops::fused_linear(
        x, weight, bias, gelu, autocast_enabled(x.device()) ? torch::kBFloat16 : x.scalar_type());
  auto y = at::linear(x, weight, bias);
  return gelu ? torch::gelu(y) : y;
}

}  // namespace combiner::model
