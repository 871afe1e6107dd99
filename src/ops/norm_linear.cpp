#include "ops/norm_linear.h"

#include <atomic>
#include <stdexcept>

#include "ops/dispatch.h"
#include "ops/norm_linear_kernel.h"
#include "ops/shape.h"

namespace combiner::ops {

namespace {
std::atomic<int64_t> norm_linear_launched{0};
}  // namespace

std::string norm_linear_unsupported(const torch::Tensor& x,
                                    const torch::Tensor& residual,
                                    const torch::Tensor& norm_weight,
                                    const torch::Tensor& norm_bias,
                                    const torch::Tensor& weight,
                                    const torch::Tensor& bias) {
  if (x.dim() != 2 || x.scalar_type() != torch::kFloat)
    return "x must be float32 [rows, width], got " + std::string(c10::toString(x.scalar_type())) +
           " " + shape_of(x);
  const int64_t W = x.size(1);
  if (!norm_linear_supported(W))
    return "width " + std::to_string(W) + " is not a multiple of 32 up to " +
           std::to_string(kNormMaxWidth);
  auto float_on_x = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat && t.device() == x.device();
  };
  if (residual.defined() && (!float_on_x(residual) || residual.sizes() != x.sizes()))
    return "the residual must be float32 " + shape_of(x) + " on x's device, got " +
           shape_of(residual);
  for (const auto* t : {&norm_weight, &norm_bias})
    if (!float_on_x(*t) || t->dim() != 1 || t->size(0) != W)
      return "the LayerNorm's weight and bias must be float32 [" + std::to_string(W) +
             "] on x's device, got " + shape_of(*t);
  if (!float_on_x(weight) || weight.dim() != 2 || weight.size(1) != W)
    return "the linear's weight must be float32 [out, " + std::to_string(W) +
           "] on x's device, got " + shape_of(weight);
  if (bias.defined() && (!float_on_x(bias) || bias.dim() != 1 || bias.size(0) != weight.size(0)))
    return "the linear's bias must be float32 [" + std::to_string(weight.size(0)) +
           "] on x's device, got " + shape_of(bias);
  if (torch::GradMode::is_enabled())
    for (const auto* t : {&x, &residual, &norm_weight, &norm_bias, &weight, &bias})
      if (t->defined() && t->requires_grad()) return "no gradient: an input requires one";
#ifndef COMBINER_WITH_CUDA_OPS
  if (x.is_cuda()) return "this build has no CUDA kernels";
#endif
  return "";
}

std::pair<torch::Tensor, torch::Tensor> norm_linear(const torch::Tensor& x,
                                                    const torch::Tensor& residual,
                                                    const torch::Tensor& norm_weight,
                                                    const torch::Tensor& norm_bias,
                                                    double eps,
                                                    const torch::Tensor& weight,
                                                    const torch::Tensor& bias,
                                                    bool gelu) {
  const auto why = norm_linear_unsupported(x, residual, norm_weight, norm_bias, weight, bias);
  if (!why.empty()) throw std::invalid_argument("norm-linear: " + why);
  const auto xc = x.contiguous(), rc = residual.defined() ? residual.contiguous() : residual;
  const auto wc = weight.contiguous(), gamma = norm_weight.contiguous(),
             beta = norm_bias.contiguous(), bc = bias.defined() ? bias.contiguous() : bias;
  auto y = torch::empty({x.size(0), weight.size(0)}, x.options());
  auto sum = residual.defined() ? torch::empty_like(xc) : xc;
  NormLinear n;
  n.rows = x.size(0);
  n.width = x.size(1);
  n.out = weight.size(0);
  n.eps = float(eps);
  n.x = xc.data_ptr<float>();
  n.residual = rc.defined() ? rc.data_ptr<float>() : nullptr;
  n.sum = rc.defined() ? sum.data_ptr<float>() : nullptr;
  n.norm_weight = gamma.data_ptr<float>();
  n.norm_bias = beta.data_ptr<float>();
  n.weight = wc.data_ptr<float>();
  n.bias = bc.defined() ? bc.data_ptr<float>() : nullptr;
  n.gelu = gelu;
  n.y = y.data_ptr<float>();
  const Kernel<NormLinear> kernel{&norm_linear_cpu,
                                  COMBINER_OPS_CUDA(norm_linear_cuda),
                                  &HostKernels::norm_linear,
                                  1,
                                  "norm-linear"};
  run_kernel(kernel, x, n, norm_linear_launched);
  return {sum, y};
}

int64_t norm_linear_launches() {
  return norm_linear_launched.load();
}

}  // namespace combiner::ops
