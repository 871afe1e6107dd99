#include "model/layer_norm.h"

#include "model/precision.h"
#include "ops/layer_norm.h"
#include "ops/norm_linear.h"

namespace combiner::model {

LayerNormImpl::LayerNormImpl(int64_t width, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({width}));
  bias = register_parameter("bias", torch::zeros({width}));
}

namespace {
torch::ScalarType output_dtype(const torch::Tensor& x) {
  return autocast_enabled(x.device()) ? torch::kBFloat16 : torch::kFloat;
}
}  // namespace

bool LayerNormImpl::fused_for(const torch::Tensor& x) const {
  return path_ == Path::kFused || (path_ == Path::kAuto && x.is_cuda());
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  if (fused_for(x) && ops::fused_norm_unsupported(x, weight, bias).empty())
    return ops::fused_layer_norm(x, weight, bias, eps_, output_dtype(x));
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, eps_);
}

std::pair<torch::Tensor, torch::Tensor> LayerNormImpl::add_forward(const torch::Tensor& x,
                                                                   const torch::Tensor& residual) {
  if (fused_for(x) && ops::fused_add_norm_unsupported(x, residual, weight, bias).empty())
    return ops::fused_add_layer_norm(x, residual, weight, bias, eps_, output_dtype(x));
  auto h = x + residual;
  return {h, forward(h)};
}

std::pair<torch::Tensor, torch::Tensor> LayerNormImpl::add_forward_linear(
    const torch::Tensor& x,
    const torch::Tensor& residual,
    const torch::Tensor& weight,
    const torch::Tensor& bias,
    bool gelu) {
  if (fused_for(x) && !autocast_enabled(x.device()) &&
      ops::norm_linear_unsupported(x, residual, this->weight, this->bias, weight, bias).empty())
    return ops::norm_linear(x, residual, this->weight, this->bias, eps_, weight, bias, gelu);
  auto [h, normed] = residual.defined() ? add_forward(x, residual) : std::pair{x, forward(x)};
  auto y = autocast_linear(normed, weight, bias);
  return {h, gelu ? torch::gelu(y) : y};
}

}  // namespace combiner::model
