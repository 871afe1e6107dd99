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

bool LinearImpl::fused_on(const torch::Device& device) const {
  return (path_ == Path::kFused || (path_ == Path::kAuto && device.is_cuda())) &&
         bias.requires_grad();
}

void LinearImpl::use_copies(const torch::Tensor& weight_copy, const torch::Tensor& bias_copy) {
  copies_ = {weight_copy,
             bias_copy,
             weight.data_ptr(),
             bias.data_ptr(),
             int64_t(weight._version()),
             int64_t(bias._version())};
}

bool LinearImpl::copies_current() const {
  return copies_.weight.defined() && copies_.weight_of == weight.data_ptr() &&
         copies_.bias_of == bias.data_ptr() &&
         copies_.weight_version == int64_t(weight._version()) &&
         copies_.bias_version == int64_t(bias._version());
}

torch::Tensor LinearImpl::run(const torch::Tensor& x, bool gelu) {
  if (fused_on(x.device()) && torch::GradMode::is_enabled() &&
      ops::fused_linear_unsupported(x, weight, bias).empty()) {
    const auto dtype = autocast_enabled(x.device()) ? torch::kBFloat16 : x.scalar_type();
    if (dtype == torch::kBFloat16 && copies_current())
      return ops::fused_linear(x, weight, bias, gelu, dtype, copies_.weight, copies_.bias);
    return ops::fused_linear(x, weight, bias, gelu, dtype);
  }
  auto y = autocast_linear(x, weight, bias);
  return gelu ? torch::gelu(y) : y;
}

}  // namespace combiner::model
