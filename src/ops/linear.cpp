#include "ops/linear.h"

#include <atomic>
#include <stdexcept>

#include "ops/bias_grad_kernel.h"
#include "ops/dispatch.h"
#include "ops/gemm.h"
#include "ops/shape.h"

namespace combiner::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> bias_grad_launched{0};

bool float_or_bf16(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16;
}

const Kernel<BiasGrad> kBiasGrad{&bias_grad_cpu,
                                 COMBINER_OPS_CUDA(bias_grad_cuda),
                                 &HostKernels::bias_grad,
                                 kBiasGradLaunches,
                                 "fused linear"};

// (d_pre, db): with GELU, d_pre = dy * GELU'(pre), else dy itself; db its column sums in float32.
std::pair<torch::Tensor, torch::Tensor> bias_grad(torch::Tensor dy, const torch::Tensor& pre) {
  dy = dy.contiguous();
  if (reinterpret_cast<uintptr_t>(dy.data_ptr()) % 16 != 0) dy = dy.clone();  // a view's offset
  const int64_t cols = dy.size(1), parts = bias_grad_parts(dy.size(0));
  const auto d_pre = pre.defined() ? torch::empty_like(dy) : dy;
  auto partial = torch::empty({parts, cols}, dy.options().dtype(torch::kFloat));
  auto db = torch::empty({cols}, partial.options());
  BiasGrad g;
  g.rows = dy.size(0);
  g.cols = cols;
  g.parts = parts;
  g.dy = dy.data_ptr();
  g.dtype = dy.scalar_type() == torch::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32;
  if (pre.defined()) {
    g.pre = pre.data_ptr();
    g.d_pre = d_pre.data_ptr();
  }
  g.partial = partial.data_ptr<float>();
  g.dbias = db.data_ptr<float>();
  run_kernel(kBiasGrad, dy, g, bias_grad_launched);
  return {d_pre, db};
}

class FusedLinear : public torch::autograd::Function<FusedLinear> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               const torch::Tensor& weight_in,
                               const torch::Tensor& bias,
                               bool gelu,
                               int64_t dtype,
                               const torch::Tensor& weight,
                               const torch::Tensor& bias_compute) {
    // In the compute dtype: x as autocast casts it (its gradient cast back by the engine, as
    // autocast's is by its own), weight and bias as given in it (weight_in and bias take their
    // gradients, in their own dtypes, from the backward).
    const auto compute = static_cast<torch::ScalarType>(dtype);
    const auto x = x_in.to(compute);
    auto out_shape = x.sizes().vec();
    out_shape.back() = weight.size(0);
    // at::linear's op for a 2-d (or flattened contiguous 3-d) input with a bias.
    auto y = addmm_float_sums(bias_compute, x.reshape({-1, x.size(-1)}), weight.t());
    ctx->save_for_backward({x, weight, gelu ? y : torch::Tensor()});
    ctx->saved_data["bias_dtype"] = int64_t(bias.scalar_type());
    ctx->saved_data["weight_dtype"] = int64_t(weight_in.scalar_type());
    return (gelu ? at::gelu(y) : y).view(out_shape);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &weight = saved[1], &pre = saved[2];
    const auto bias_dtype = static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    const auto weight_dtype =
        static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const int64_t out = weight.size(0);
    auto [d_pre, db] = bias_grad(grads[0].to(x.scalar_type()).reshape({-1, out}), pre);
    torch::Tensor dx, dw;
    if (ctx->needs_input_grad(0)) dx = mm_float_sums(d_pre, weight).view(x.sizes());
    if (ctx->needs_input_grad(1)) {
      const auto x2d = x.reshape({-1, x.size(-1)});
      dw = weight_dtype == torch::kFloat && x.scalar_type() == torch::kBFloat16
               ? mm_t_float_out(d_pre, x2d)
               : mm_float_sums(d_pre.t(), x2d);
    }
    if (bias_dtype != torch::kFloat) db = db.to(bias_dtype);
    return {dx, dw, db, {}, {}, {}, {}};
  }
};

}  // namespace

std::string fused_linear_unsupported(const torch::Tensor& x,
                                     const torch::Tensor& weight,
                                     const torch::Tensor& bias) {
  if (x.dim() < 1 || !float_or_bf16(x))
    return "x must be float32 or bfloat16 [..., in], got " +
           std::string(c10::toString(x.scalar_type())) + " " + shape_of(x);
  if (weight.dim() != 2 || weight.size(1) != x.size(-1) || !float_or_bf16(weight) ||
      weight.device() != x.device())
    return "the weight must be float32 or bfloat16 [out, " + std::to_string(x.size(-1)) +
           "] on x's device, got " + shape_of(weight);
  const int64_t out = weight.size(0);
  if (!bias.defined() || bias.dim() != 1 || bias.size(0) != out || !float_or_bf16(bias) ||
      bias.device() != x.device())
    return "the bias must be float32 or bfloat16 [" + std::to_string(out) + "] on x's device";
  if (!bias_grad_supported(out))
    return "out " + std::to_string(out) + " is not a multiple of " + std::to_string(kBiasVector);
#ifndef COMBINER_WITH_CUDA_OPS
  if (x.is_cuda()) return "this build has no CUDA kernels";
#endif
  return "";
}

torch::Tensor fused_linear(const torch::Tensor& x,
                           const torch::Tensor& weight,
                           const torch::Tensor& bias,
                           bool gelu,
                           torch::ScalarType dtype,
                           const torch::Tensor& weight_copy,
                           const torch::Tensor& bias_copy) {
  const auto why = fused_linear_unsupported(x, weight, bias);
  if (!why.empty()) throw std::invalid_argument("fused linear: " + why);
  if (dtype != torch::kFloat && dtype != torch::kBFloat16)
    throw std::invalid_argument(std::string("fused linear: the compute dtype must be float32 or "
                                            "bfloat16, got ") +
                                c10::toString(dtype));
  auto copy_fits = [&](const torch::Tensor& copy, const torch::Tensor& of) {
    return !copy.defined() || (copy.scalar_type() == dtype && copy.sizes() == of.sizes() &&
                               copy.device() == of.device() && !copy.requires_grad());
  };
  if (!copy_fits(weight_copy, weight) || !copy_fits(bias_copy, bias))
    throw std::invalid_argument(std::string("fused linear: a weight or bias copy must be ") +
                                c10::toString(dtype) +
                                " of its parameter's shape and device, without a gradient");
  // The casts autocast would make where no copy is given, outside the graph: the backward gives
  // weight and bias their gradients.
  auto in_dtype = [&](const torch::Tensor& copy, const torch::Tensor& of) {
    return copy.defined() ? copy : of.detach().to(dtype);
  };
  return FusedLinear::apply(x,
                            weight,
                            bias,
                            gelu,
                            int64_t(dtype),
                            in_dtype(weight_copy, weight),
                            in_dtype(bias_copy, bias));
}

int64_t bias_grad_launches() {
  return bias_grad_launched.load();
}

}  // namespace combiner::ops
