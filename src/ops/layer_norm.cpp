#include "ops/layer_norm.h"

#include <atomic>
#include <stdexcept>

#include "ops/dispatch.h"
#include "ops/layer_norm_kernel.h"

namespace combiner::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> launched{0};

Dtype dtype_of(torch::ScalarType t) {
  if (t == torch::kBFloat16) return Dtype::kBFloat16;
  if (t == torch::kFloat) return Dtype::kFloat32;
  throw std::invalid_argument(
      std::string("fused layer norm: y and dy must be float32 or bfloat16, got ") +
      c10::toString(t));
}

const Kernel<NormForward> kForward{&norm_forward_cpu,
                                   COMBINER_OPS_CUDA(norm_forward_cuda),
                                   &HostKernels::norm_forward,
                                   kNormForwardLaunches,
                                   "fused layer norm"};
const Kernel<NormBackward> kBackward{&norm_backward_cpu,
                                     COMBINER_OPS_CUDA(norm_backward_cuda),
                                     &HostKernels::norm_backward,
                                     kNormBackwardLaunches,
                                     "fused layer norm"};

// The forward of x (+ residual): y in `out`, mean and rstd; with a residual, its sum with x.
struct NormOut {
  torch::Tensor y, mean, rstd, sum;
};
NormOut norm_forward(const torch::Tensor& x,
                     const torch::Tensor& residual,
                     const torch::Tensor& weight,
                     const torch::Tensor& bias,
                     double eps,
                     torch::ScalarType out) {
  const int64_t W = x.size(-1), rows = W > 0 ? x.numel() / W : 0;
  NormOut o;
  o.y = torch::empty(x.sizes(), x.options().dtype(out));
  o.mean = torch::empty({rows}, x.options());
  o.rstd = torch::empty({rows}, x.options());
  NormForward f;
  f.rows = rows;
  f.width = W;
  f.eps = float(eps);
  f.x = x.data_ptr<float>();
  f.weight = weight.data_ptr<float>();
  f.bias = bias.data_ptr<float>();
  f.y = o.y.data_ptr();
  f.y_dtype = dtype_of(out);
  f.mean = o.mean.data_ptr<float>();
  f.rstd = o.rstd.data_ptr<float>();
  if (residual.defined()) {
    o.sum = torch::empty_like(x);
    f.residual = residual.data_ptr();
    f.residual_dtype = dtype_of(residual.scalar_type());
    f.sum = o.sum.data_ptr<float>();
  }
  run_kernel(kForward, x, f, launched);
  return o;
}

// The backward from the saved x (the sum, with a residual), mean and rstd: dx (plus d_sum where
// defined), dweight, dbias, and dx in `residual_type` (dx itself where that is float32).
tensor_list norm_backward(const torch::Tensor& x,
                          const torch::Tensor& weight,
                          const torch::Tensor& mean,
                          const torch::Tensor& rstd,
                          torch::Tensor dy,
                          const torch::Tensor& d_sum_in,
                          torch::ScalarType residual_type) {
  if (dy.scalar_type() != torch::kBFloat16) dy = dy.to(torch::kFloat);
  dy = dy.contiguous();
  const int64_t W = x.size(-1), rows = mean.size(0), parts = norm_parts(rows);
  auto dx = torch::empty_like(x);
  auto partial = torch::empty({parts, 2, W}, x.options());
  auto dweight = torch::empty({W}, x.options());
  auto dbias = torch::empty({W}, x.options());
  NormBackward b;
  b.rows = rows;
  b.width = W;
  b.parts = parts;
  b.x = x.data_ptr<float>();
  b.weight = weight.data_ptr<float>();
  b.mean = mean.data_ptr<float>();
  b.rstd = rstd.data_ptr<float>();
  b.dy = dy.data_ptr();
  b.dy_dtype = dtype_of(dy.scalar_type());
  b.dx = dx.data_ptr<float>();
  b.partial = partial.data_ptr<float>();
  b.dweight = dweight.data_ptr<float>();
  b.dbias = dbias.data_ptr<float>();
  torch::Tensor d_sum, d_residual = dx;
  if (d_sum_in.defined()) {
    d_sum = d_sum_in.to(torch::kFloat).contiguous();
    b.d_sum = d_sum.data_ptr<float>();
  }
  if (residual_type != torch::kFloat) {
    d_residual = torch::empty(x.sizes(), x.options().dtype(residual_type));
    b.d_residual = d_residual.data_ptr();
    b.residual_dtype = dtype_of(residual_type);
  }
  run_kernel(kBackward, x, b, launched);
  return {dx, d_residual, dweight, dbias};
}

class FusedNorm : public torch::autograd::Function<FusedNorm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               const torch::Tensor& weight,
                               const torch::Tensor& bias,
                               double eps,
                               int64_t out_dtype) {
    const auto x = x_in.contiguous();
    auto o = norm_forward(x, {}, weight, bias, eps, static_cast<torch::ScalarType>(out_dtype));
    ctx->save_for_backward({x, weight, o.mean, o.rstd});
    return o.y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g =
        norm_backward(saved[0], saved[1], saved[2], saved[3], grads[0], {}, torch::kFloat);
    return {g[0], g[2], g[3], {}, {}};
  }
};

// (x, residual) -> (s = x + residual, LayerNorm(s)).
class FusedAddNorm : public torch::autograd::Function<FusedAddNorm> {
 public:
  static tensor_list forward(AutogradContext* ctx,
                             const torch::Tensor& x_in,
                             const torch::Tensor& residual_in,
                             const torch::Tensor& weight,
                             const torch::Tensor& bias,
                             double eps,
                             int64_t out_dtype) {
    const auto x = x_in.contiguous(), residual = residual_in.contiguous();
    auto o =
        norm_forward(x, residual, weight, bias, eps, static_cast<torch::ScalarType>(out_dtype));
    ctx->save_for_backward({o.sum, weight, o.mean, o.rstd});
    ctx->saved_data["residual_dtype"] = int64_t(residual.scalar_type());
    // An output no one reads (the sum, after the final LayerNorm) gets no gradient, not a
    // tensor of zeros to fill and read.
    ctx->set_materialize_grads(false);
    return {o.sum, o.y};
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto residual_type =
        static_cast<torch::ScalarType>(ctx->saved_data["residual_dtype"].toInt());
    const auto &d_sum = grads[0], &dy = grads[1];
    if (!dy.defined()) {  // only the sum was used
      if (!d_sum.defined()) return tensor_list(6);
      return {d_sum, d_sum.to(residual_type), {}, {}, {}, {}};
    }
    const auto g = norm_backward(saved[0], saved[1], saved[2], saved[3], dy, d_sum, residual_type);
    return {g[0], g[1], g[2], g[3], {}, {}};
  }
};

}  // namespace

std::string fused_norm_unsupported(const torch::Tensor& x,
                                   const torch::Tensor& weight,
                                   const torch::Tensor& bias) {
  if (x.dim() < 1) return "x has no dimensions";
  if (x.scalar_type() != torch::kFloat) return "x is not float32";
  const int64_t W = x.size(-1);
  if (!norm_width_supported(W))
    return "width " + std::to_string(W) + " is not a multiple of 32 up to " +
           std::to_string(kNormMaxWidth);
  for (const auto* p : {&weight, &bias})
    if (!p->defined() || p->scalar_type() != torch::kFloat || p->dim() != 1 || p->size(0) != W ||
        !p->is_contiguous() || p->device() != x.device())
      return "weight and bias must be contiguous float32 [" + std::to_string(W) + "] on " +
             x.device().str();
#ifndef COMBINER_WITH_CUDA_OPS
  if (x.is_cuda()) return "this build has no CUDA kernels";
#endif
  return "";
}

torch::Tensor fused_layer_norm(const torch::Tensor& x,
                               const torch::Tensor& weight,
                               const torch::Tensor& bias,
                               double eps,
                               torch::ScalarType out_dtype) {
  const auto why = fused_norm_unsupported(x, weight, bias);
  if (!why.empty()) throw std::invalid_argument("fused layer norm: " + why);
  dtype_of(out_dtype);
  return FusedNorm::apply(x, weight, bias, eps, static_cast<int64_t>(out_dtype));
}

std::string fused_add_norm_unsupported(const torch::Tensor& x,
                                       const torch::Tensor& residual,
                                       const torch::Tensor& weight,
                                       const torch::Tensor& bias) {
  const auto why = fused_norm_unsupported(x, weight, bias);
  if (!why.empty()) return why;
  if (!residual.defined() || residual.sizes() != x.sizes() || residual.device() != x.device() ||
      (residual.scalar_type() != torch::kFloat && residual.scalar_type() != torch::kBFloat16))
    return "the residual must be float32 or bfloat16 of x's shape on x's device";
  return "";
}

std::pair<torch::Tensor, torch::Tensor> fused_add_layer_norm(const torch::Tensor& x,
                                                             const torch::Tensor& residual,
                                                             const torch::Tensor& weight,
                                                             const torch::Tensor& bias,
                                                             double eps,
                                                             torch::ScalarType out_dtype) {
  const auto why = fused_add_norm_unsupported(x, residual, weight, bias);
  if (!why.empty()) throw std::invalid_argument("fused add and layer norm: " + why);
  dtype_of(out_dtype);
  const auto out =
      FusedAddNorm::apply(x, residual, weight, bias, eps, static_cast<int64_t>(out_dtype));
  return {out[0], out[1]};
}

int64_t norm_kernel_launches() {
  return launched.load();
}

}  // namespace combiner::ops
