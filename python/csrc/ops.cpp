// combiner::attention as a PyTorch operator. TORCH_LIBRARY states the schemas; the CPU and CUDA
// kernels build the attention library's module for the variant (make_attention, the trainer's
// own code: fused kernels on CUDA where they apply, the LibTorch composition elsewhere) with the
// DeepSets maps passed in; Meta kernels give torch.compile the output's shape; the Autograd kernel
// is a torch::autograd::Function whose backward is the second operator, attention_backward. That
// one runs the forward again with LibTorch's autograd on and differentiates it (the fused backward
// kernels on CUDA): the forward keeps only its inputs, as activation checkpointing does.
#include <torch/library.h>
#include <torch/torch.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include "attention/attention.h"
#include "attention/fused/fused.h"
#include "attention/reference.h"
#include "call.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace combiner::attention {
namespace {

using op::bind_maps;
using op::checked;
using op::kMapNames;
using op::MaybeTensor;
using op::text;
using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// ---- kernels ----------------------------------------------------------------------------------

Tensor attention_kernel(const Tensor& q,
                        const Tensor& k,
                        const Tensor& v,
                        c10::string_view variant,
                        int64_t block,
                        int64_t row_len,
                        c10::string_view abstraction,
                        const MaybeTensor& phi_query,
                        const MaybeTensor& phi_key) {
  const auto call = checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  if (call.empty) return torch::empty(v.sizes(), v.options());
  torch::NoGradGuard no_grad;
  bind_maps(call);
  return call.module->forward(q, k, v).contiguous();
}

// [dq, dk, dv, then d(phi_query), d(phi_key) for those given].
std::vector<Tensor> attention_backward_kernel(const Tensor& grad,
                                              const Tensor& q,
                                              const Tensor& k,
                                              const Tensor& v,
                                              c10::string_view variant,
                                              int64_t block,
                                              int64_t row_len,
                                              c10::string_view abstraction,
                                              const MaybeTensor& phi_query,
                                              const MaybeTensor& phi_key) {
  const auto call = checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  TORCH_CHECK_VALUE(grad.sizes() == v.sizes(),
                    "combiner::attention_backward: grad: expected v's shape ",
                    v.sizes(),
                    ", got ",
                    grad.sizes());
  // The dispatcher calls this kernel below the Autograd key, with autograd's keys excluded for
  // everything it calls: put them back, and grad mode on, to record the recomputed forward.
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  c10::impl::ForceDispatchKeyGuard keys(
      tls.included_, tls.excluded_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView);
  torch::AutoGradMode grad_mode(true);
  std::vector<Tensor> inputs = {
      q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
  bind_maps(call);
  const auto params = call.module->named_parameters(/*recurse=*/false);
  for (const char* name : kMapNames)
    if (params.contains(name)) inputs.push_back(params[name]);
  std::vector<Tensor> grads(inputs.size());
  if (!call.empty) {
    const auto out = call.module->forward(inputs[0], inputs[1], inputs[2]);
    grads = torch::autograd::grad({out},
                                  inputs,
                                  {grad},
                                  /*retain_graph=*/false,
                                  /*create_graph=*/false,
                                  /*allow_unused=*/true);
  }
  for (size_t i = 0; i < grads.size(); ++i)
    grads[i] = grads[i].defined() ? grads[i].contiguous() : torch::zeros_like(inputs[i]);
  return grads;
}

Tensor attention_meta(const Tensor& q,
                      const Tensor& k,
                      const Tensor& v,
                      c10::string_view variant,
                      int64_t block,
                      int64_t row_len,
                      c10::string_view abstraction,
                      const MaybeTensor& phi_query,
                      const MaybeTensor& phi_key) {
  checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  return at::empty_symint(v.sym_sizes(), v.options());
}

std::vector<Tensor> attention_backward_meta(const Tensor& grad,
                                            const Tensor& q,
                                            const Tensor& k,
                                            const Tensor& v,
                                            c10::string_view variant,
                                            int64_t block,
                                            int64_t row_len,
                                            c10::string_view abstraction,
                                            const MaybeTensor& phi_query,
                                            const MaybeTensor& phi_key) {
  checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  std::vector<Tensor> grads;
  for (const Tensor& t : {q, k, v}) grads.push_back(at::empty_symint(t.sym_sizes(), t.options()));
  for (const auto* phi : {&phi_query, &phi_key})
    if (phi->has_value()) grads.push_back(at::empty_symint((*phi)->sym_sizes(), (*phi)->options()));
  return grads;
}

// The dense float64 reference (reference.h) with the given maps: [B, H, L, Dv] float64, CPU.
Tensor reference_kernel(const Tensor& q,
                        const Tensor& k,
                        const Tensor& v,
                        c10::string_view variant,
                        int64_t block,
                        int64_t row_len,
                        c10::string_view abstraction,
                        const MaybeTensor& phi_query,
                        const MaybeTensor& phi_key) {
  const auto call = checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  TORCH_CHECK_VALUE(!call.empty,
                    "combiner::reference_attention: expected B, H, Dv > 0, got q ",
                    q.sizes(),
                    ", v ",
                    v.sizes());
  const DeepSetsMaps maps{call.maps[0].value_or(Tensor()), call.maps[1].value_or(Tensor())};
  return torch::matmul(effective_matrix(call.options, q, k, maps), v.detach().to(torch::kDouble));
}

// ---- autograd ---------------------------------------------------------------------------------

using AttentionSignature = Tensor(const Tensor&,
                                  const Tensor&,
                                  const Tensor&,
                                  c10::string_view,
                                  int64_t,
                                  int64_t,
                                  c10::string_view,
                                  const MaybeTensor&,
                                  const MaybeTensor&);
using BackwardSignature = std::vector<Tensor>(const Tensor&,
                                              const Tensor&,
                                              const Tensor&,
                                              const Tensor&,
                                              c10::string_view,
                                              int64_t,
                                              int64_t,
                                              c10::string_view,
                                              const MaybeTensor&,
                                              const MaybeTensor&);

class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static Tensor forward(AutogradContext* ctx,
                        const Tensor& q,
                        const Tensor& k,
                        const Tensor& v,
                        c10::string_view variant,
                        int64_t block,
                        int64_t row_len,
                        c10::string_view abstraction,
                        const MaybeTensor& phi_query,
                        const MaybeTensor& phi_key) {
    ctx->save_for_backward({q, k, v, phi_query.value_or(Tensor()), phi_key.value_or(Tensor())});
    ctx->saved_data["variant"] = text(variant);
    ctx->saved_data["block"] = block;
    ctx->saved_data["row_len"] = row_len;
    ctx->saved_data["abstraction"] = text(abstraction);
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("combiner::attention", "")
                               .typed<AttentionSignature>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("combiner::attention_backward", "")
                               .typed<BackwardSignature>();
    const auto saved = ctx->get_saved_variables();
    const auto maybe = [](const Tensor& t) { return t.defined() ? MaybeTensor(t) : std::nullopt; };
    const auto variant = ctx->saved_data["variant"].toStringRef();
    const auto abstraction = ctx->saved_data["abstraction"].toStringRef();
    const auto grads = op.call(grad_outputs[0],
                               saved[0],
                               saved[1],
                               saved[2],
                               variant,
                               ctx->saved_data["block"].toInt(),
                               ctx->saved_data["row_len"].toInt(),
                               abstraction,
                               maybe(saved[3]),
                               maybe(saved[4]));
    // One entry per forward argument: q, k, v, four non-tensors, phi_query, phi_key.
    tensor_list out = {grads[0], grads[1], grads[2], {}, {}, {}, {}, {}, {}};
    size_t next = 3;
    for (int m = 0; m < 2; ++m)
      if (saved[3 + m].defined()) out[7 + m] = grads[next++];
    return out;
  }
};

Tensor attention_autograd(const Tensor& q,
                          const Tensor& k,
                          const Tensor& v,
                          c10::string_view variant,
                          int64_t block,
                          int64_t row_len,
                          c10::string_view abstraction,
                          const MaybeTensor& phi_query,
                          const MaybeTensor& phi_key) {
  return AttentionFunction::apply(
      q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
}

// ---- what the Python side asks -----------------------------------------------------------------

std::vector<std::string> variants() {
  return variant_names();
}

std::vector<std::string> abstractions() {
  return abstraction_names();
}

// Checks the options as far as they do not depend on L (row_len must divide L: checked per call)
// and names the DeepSets maps the variant learns with that abstraction (phi_query, phi_key).
std::vector<std::string> learned_maps(c10::string_view variant,
                                      int64_t block,
                                      int64_t row_len,
                                      c10::string_view abstraction) {
  const AttentionOptions o{text(variant), block, row_len, text(abstraction)};
  TORCH_CHECK_VALUE(!uses_row_len(o.type) || row_len > 0,
                    "combiner::attention: row_len: must be > 0 for '",
                    o.type,
                    "', got ",
                    row_len);
  op::check_options(o, std::max<int64_t>(row_len, 1));
  return op::learned_map_names(*op::make_module(o, std::max<int64_t>(row_len, 1), 1));
}

// Which implementation the operator runs for q, v [B, H, L, D] of this variant.
std::string path(const Tensor& q, const Tensor& v, c10::string_view variant) {
  AttentionOptions o{text(variant), 0, 0, "max"};
  o.block = uses_block(o.type) ? 1 : 0;
  o.row_len = uses_row_len(o.type) ? 1 : 0;
  op::check_options(o, 1);
  if (!op::make_module(o, 1, 1)->has_fused_kernel()) return "LibTorch path";
  const auto why = fused_cuda_unavailable(q, v);
  return why.empty() ? "fused CUDA kernels" : "LibTorch path (" + why + ")";
}

}  // namespace

TORCH_LIBRARY(combiner, m) {
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, str variant, int block=0, int row_len=0, "
      "str abstraction=\"max\", Tensor? phi_query=None, Tensor? phi_key=None) -> Tensor");
  m.def(
      "attention_backward(Tensor grad, Tensor q, Tensor k, Tensor v, str variant, int block, "
      "int row_len, str abstraction, Tensor? phi_query, Tensor? phi_key) -> Tensor[]");
  m.def(
      "reference_attention(Tensor q, Tensor k, Tensor v, str variant, int block=0, "
      "int row_len=0, str abstraction=\"max\", Tensor? phi_query=None, Tensor? phi_key=None) "
      "-> Tensor");
  m.def("variants() -> str[]", &variants);
  m.def("abstractions() -> str[]", &abstractions);
  m.def("learned_maps(str variant, int block, int row_len, str abstraction) -> str[]",
        &learned_maps);
  m.def("path(Tensor q, Tensor v, str variant) -> str", &path);
}

TORCH_LIBRARY_IMPL(combiner, CPU, m) {
  m.impl("attention", &attention_kernel);
  m.impl("attention_backward", &attention_backward_kernel);
  m.impl("reference_attention", &reference_kernel);
}

TORCH_LIBRARY_IMPL(combiner, CUDA, m) {
  m.impl("attention", &attention_kernel);
  m.impl("attention_backward", &attention_backward_kernel);
}

TORCH_LIBRARY_IMPL(combiner, Meta, m) {
  m.impl("attention", &attention_meta);
  m.impl("attention_backward", &attention_backward_meta);
}

TORCH_LIBRARY_IMPL(combiner, Autograd, m) {
  m.impl("attention", &attention_autograd);
  // No second derivative: differentiating the backward (create_graph=True, then grad again)
  // raises "derivative for combiner::attention_backward is not implemented".
  m.impl("attention_backward", torch::autograd::autogradNotImplementedFallback());
}

}  // namespace combiner::attention
