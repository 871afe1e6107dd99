#include "model/layer_norm.h"

#include "model/precision.h"
#include "ops/layer_norm.h"

namespace combiner::model {

LayerNormImpl::LayerNormImpl(int64_t width, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({width}));
  bias = register_parameter("bias", torch::zeros({width}));
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  const bool fused = path_ == Path::kFused || (path_ == Path::kAuto && x.is_cuda());
  if (fused && ops::fused_norm_unsupported(x, weight, bias).empty()) {
    const auto out = autocast_enabled(x.device()) ? torch::kBFloat16 : torch::kFloat;
    return ops::fused_layer_norm(x, weight, bias, eps_, out);
  }
  return torch::layer_norm(x, {weight.size(0)}, weight, bias, eps_);
}

}  // namespace combiner::model
