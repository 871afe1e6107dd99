// combiner::attention as a PyTorch operator. TORCH_LIBRARY states the schemas; the CPU and CUDA
// kernels build the attention library's module for the variant (make_attention, the trainer's
// own code: fused kernels on CUDA where they apply, the LibTorch composition elsewhere) with the
// DeepSets maps passed in; Meta kernels give torch.compile the output's shape. The Autograd kernel
// is a torch::autograd::Function with two ways to differentiate:
// - called on plain CPU / CUDA tensors (eager PyTorch, no tracing mode), it runs the module's
//   forward with LibTorch's autograd on, as the trainer does, and keeps that graph (the fused
//   call's own saved o and log-sum-exps on CUDA) until its backward, which differentiates it: one
//   forward and one backward, as in the C++ library;
// - traced (torch.compile, opcheck's fake tensors, functorch) or asked for a graph of the
//   backward (create_graph=True), its backward is the second operator, attention_backward, which
//   runs the forward again with autograd on and differentiates it: the forward keeps only its
//   inputs, as activation checkpointing does.
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

// Whether every tensor is a plain strided CPU or CUDA one, with no tracing mode or functorch
// transform on: only then may the forward keep LibTorch's graph (a tracer must see the two
// operators, which that graph would hide from it).
bool plain_tensors(std::initializer_list<const Tensor*> tensors) {
  const c10::DispatchKeySet traced{c10::DispatchKey::Python,
                                   c10::DispatchKey::PythonTLSSnapshot,
                                   c10::DispatchKey::PythonDispatcher,
                                   c10::DispatchKey::Functionalize,
                                   c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                                   c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                                   c10::DispatchKey::FuncTorchGradWrapper,
                                   c10::DispatchKey::FuncTorchBatched,
                                   c10::DispatchKey::Batched};
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  if (tls.included_.has_any(traced)) return false;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (t->key_set().has_any(traced) || t->layout() != c10::kStrided) return false;
    if (!t->device().is_cpu() && !t->device().is_cuda()) return false;
  }
  return true;
}

// Saved for backward, in this order: q, k, v, phi_query, phi_key (undefined where not given);
// then, when the forward kept its graph, that graph's five leaves (the same tensors' data,
// detached; the maps where the variant learns them) and its output.
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
                        const MaybeTensor& phi_key,
                        bool keep_graph) {
    ctx->saved_data["variant"] = text(variant);
    ctx->saved_data["block"] = block;
    ctx->saved_data["row_len"] = row_len;
    ctx->saved_data["abstraction"] = text(abstraction);
    const Tensor phi[2] = {phi_query.value_or(Tensor()), phi_key.value_or(Tensor())};
    std::vector<Tensor> saved = {q, k, v, phi[0], phi[1]};
    if (keep_graph) {
      const auto call = checked(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
      if (!call.empty) {
        std::vector<Tensor> leaves = {q.detach().requires_grad_(),
                                      k.detach().requires_grad_(),
                                      v.detach().requires_grad_(),
                                      Tensor(),
                                      Tensor()};
        bind_maps(call);
        const auto params = call.module->named_parameters(/*recurse=*/false);
        for (int m = 0; m < 2; ++m)
          if (params.contains(kMapNames[m])) leaves[3 + m] = params[kMapNames[m]];
        Tensor out;
        {
          torch::AutoGradMode grad_mode(true);
          out = call.module->forward(leaves[0], leaves[1], leaves[2]);
        }
        saved.insert(saved.end(), leaves.begin(), leaves.end());
        saved.push_back(out);
        ctx->save_for_backward(saved);
        // A tensor of its own (contiguous, as the operator's kernels return it): the caller may
        // change it in place, as it could before, without touching what the graph saved.
        return out.detach().clone(at::MemoryFormat::Contiguous);
      }
    }
    ctx->save_for_backward(saved);
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("combiner::attention", "")
                               .typed<AttentionSignature>();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return op.call(q, k, v, variant, block, row_len, abstraction, phi_query, phi_key);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    // One entry per forward argument: q, k, v, four non-tensors, phi_query, phi_key, keep_graph.
    tensor_list out(10);
    if (saved.size() == 11 && !torch::GradMode::is_enabled()) {
      // The forward's graph: its leaves are saved[5..9], its output saved[10].
      std::vector<Tensor> leaves;
      for (int i = 5; i < 10; ++i)
        if (saved[i].defined()) leaves.push_back(saved[i]);
      // retain_graph: the engine frees the graph with this node's saved tensors after this call
      // (or keeps it, for a second backward, when the caller retains the outer graph).
      const auto grads = torch::autograd::grad({saved[10]},
                                               leaves,
                                               {grad_outputs[0]},
                                               /*retain_graph=*/true,
                                               /*create_graph=*/false,
                                               /*allow_unused=*/true);
      size_t next = 0;
      for (int i = 0; i < 5; ++i) {
        if (!saved[5 + i].defined()) continue;
        const Tensor& g = grads[next++];
        out[i < 3 ? i : 4 + i] = g.defined() ? g : torch::zeros_like(saved[5 + i]);
      }
      return out;
    }
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("combiner::attention_backward", "")
                               .typed<BackwardSignature>();
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
    out[0] = grads[0];
    out[1] = grads[1];
    out[2] = grads[2];
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
  const Tensor phi[2] = {phi_query.value_or(Tensor()), phi_key.value_or(Tensor())};
  bool wants_grad = false;
  for (const Tensor& t : {q, k, v, phi[0], phi[1]})
    wants_grad = wants_grad || (t.defined() && t.requires_grad());
  const bool keep_graph =
      torch::GradMode::is_enabled() && wants_grad && plain_tensors({&q, &k, &v, &phi[0], &phi[1]});
  return AttentionFunction::apply(
      q, k, v, variant, block, row_len, abstraction, phi_query, phi_key, keep_graph);
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
