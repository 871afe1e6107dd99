#include "model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "ops/gemm.h"

namespace combiner::model {

namespace {

// LibTorch 2.4 replaced the per-device autocast functions with ones that take a device type;
// the Debian build (1.13) has only the old ones, a pip torch of today only the new ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool is_enabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
void set_enabled(bool cuda, bool on) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, on);
}
at::ScalarType get_dtype(bool cuda) {
  return at::autocast::get_autocast_dtype(cuda ? at::kCUDA : at::kCPU);
}
void set_dtype(bool cuda, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, dtype);
}
#else
bool is_enabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(bool cuda, bool on) {
  if (cuda)
    at::autocast::set_enabled(on);
  else
    at::autocast::set_cpu_enabled(on);
}
at::ScalarType get_dtype(bool cuda) {
  return cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(bool cuda, at::ScalarType dtype) {
  if (cuda)
    at::autocast::set_autocast_gpu_dtype(dtype);
  else
    at::autocast::set_autocast_cpu_dtype(dtype);
}
#endif

}  // namespace

bool autocast_enabled(const torch::Device& device) {
  return is_enabled(device.is_cuda());
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// bias + x weight^T of bf16 bias [out] (or none), x [n, in] and weight [out, in], as a GPU's
// addmm and its backward take it: float32 sums of the bf16 operands, each result rounded to bf16.
// What LibTorch records is what a GPU launches: the addmm, then the two mms and the bias's sum.
class Bf16Addmm : public torch::autograd::Function<Bf16Addmm> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& bias,
                               const torch::Tensor& x,
                               const torch::Tensor& weight) {
    ctx->save_for_backward({x, weight});
    return bias.defined() ? ops::addmm_float_sums(bias, x, weight.t())
                          : ops::mm_float_sums(x, weight.t());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& dy = grads[0];
    torch::Tensor dbias, dx, dweight;
    if (ctx->needs_input_grad(0)) dbias = dy.sum(0);  // float32 sums, as a reduction's are
    if (ctx->needs_input_grad(1)) dx = ops::mm_float_sums(dy, saved[1]);
    if (ctx->needs_input_grad(2)) dweight = ops::mm_float_sums(dy.t(), saved[0]);
    return {dbias, dx, dweight};
  }
};

}  // namespace

torch::Tensor autocast_linear(const torch::Tensor& x,
                              const torch::Tensor& weight,
                              const torch::Tensor& bias) {
  if (!x.device().is_cpu() || !autocast_enabled(x.device()) ||
      get_dtype(/*cuda=*/false) != at::kBFloat16)
    return at::linear(x, weight, bias);
  // autocast's casts, made here (the cast of a tensor already bf16 is no op).
  const AutocastGuard casts_made_here(false, x.device());
  const auto bf16 = [](const torch::Tensor& t) {
    return !t.defined() || t.scalar_type() == at::kBFloat16 ? t : t.to(at::kBFloat16);
  };
  auto shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return Bf16Addmm::apply(bf16(bias), bf16(x).reshape({-1, x.size(-1)}), bf16(weight)).view(shape);
}

AutocastGuard::AutocastGuard(bool enabled, const torch::Device& device)
    : cuda_(device.is_cuda()), enabled_(enabled), previous_(is_enabled(cuda_)) {
  previous_dtype_ = get_dtype(cuda_);
  set_enabled(cuda_, enabled);
  set_dtype(cuda_, at::kBFloat16);
  if (enabled_) at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // The cast weights are cached while any autocast scope is open; drop them with the last one.
  if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(cuda_, previous_);
  set_dtype(cuda_, previous_dtype_);
}

}  // namespace combiner::model
