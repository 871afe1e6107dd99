// The operator's argument checks and the module it runs (call.h).
#include "call.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <mutex>
#include <utility>

namespace combiner::attention::op {

std::string text(c10::string_view s) {
  return std::string(s.data(), s.size());
}

namespace {
// validate()'s messages name config keys (model.attention.row_len); the operator's arguments
// carry the same names without the prefix, except `type`, which is `variant` here.
std::string as_operator_message(std::string what) {
  for (const auto& [key, name] :
       {std::pair<std::string, std::string>{"model.attention.type", "variant"},
        {"model.attention: ", ""},
        {"model.attention.", ""}}) {
    const auto at = what.find(key);
    if (at != std::string::npos) what.replace(at, key.size(), name);
  }
  return what;
}
}  // namespace

void check_options(const AttentionOptions& o, int64_t length) {
  try {
    validate(o, length);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, "combiner::attention: ", as_operator_message(e.what()));
  }
  TORCH_CHECK_VALUE(uses_block(o.type) || o.block == 0,
                    "combiner::attention: block: '",
                    o.type,
                    "' reads no block (fixed and combiner-fixed do), got ",
                    o.block);
  TORCH_CHECK_VALUE(uses_row_len(o.type) || o.row_len == 0,
                    "combiner::attention: row_len: '",
                    o.type,
                    "' reads no row_len (axial, combiner-axial-* and combiner-mixture do), got ",
                    o.row_len);
}

// The variant's module, its maps still the ones make_attention() draws from the default CPU
// generator: the draw is undone (the operator passes its own maps), so that calling the operator
// leaves the caller's random stream where it was. The module is host-side bookkeeping made of
// real CPU tensors, also while torch.compile runs the Meta kernels under its fake-tensor mode
// (which makes factories return meta tensors and routes them through Python): Meta and
// Python's keys are taken out of the thread's dispatch keys here, so that no mode sees the draw.
std::shared_ptr<AttentionImpl> make_module(const AttentionOptions& o, int64_t L, int64_t D) {
  using c10::DispatchKey;
  const c10::DispatchKeySet python({DispatchKey::Python, DispatchKey::PythonTLSSnapshot});
  const auto tls = c10::impl::tls_local_dispatch_key_set();
  c10::impl::ForceDispatchKeyGuard real_tensors(
      tls.included_.remove_backend(c10::BackendComponent::MetaBit) - python -
          c10::DispatchKeySet(DispatchKey::PythonDispatcher),
      tls.excluded_ | python);
  auto generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  auto module = make_attention(o, L, D);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
  return module;
}

std::vector<std::string> learned_map_names(const AttentionImpl& module) {
  std::vector<std::string> names;
  const auto params = module.named_parameters(/*recurse=*/false);
  for (const char* name : kMapNames)
    if (params.contains(name)) names.push_back(name);
  return names;
}

Call checked(const torch::Tensor& q,
             const torch::Tensor& k,
             const torch::Tensor& v,
             c10::string_view variant,
             int64_t block,
             int64_t row_len,
             c10::string_view abstraction,
             const MaybeTensor& phi_query,
             const MaybeTensor& phi_key) {
  const char* op = "combiner::attention: ";
  for (const auto& [name, t] :
       {std::pair<const char*, const torch::Tensor&>{"q", q}, {"k", k}, {"v", v}})
    TORCH_CHECK_VALUE(
        t.dim() == 4, op, name, ": expected [B, H, L, D] (4 dims), got ", t.sym_sizes());
  TORCH_CHECK_VALUE(k.sym_sizes() == q.sym_sizes(),
                    op,
                    "k: expected q's shape ",
                    q.sym_sizes(),
                    ", got ",
                    k.sym_sizes());
  TORCH_CHECK_VALUE(v.sym_sizes().slice(0, 3) == q.sym_sizes().slice(0, 3),
                    op,
                    "v: expected [B, H, L, Dv] with q's B, H, L ",
                    q.sym_sizes().slice(0, 3),
                    ", got ",
                    v.sym_sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(q.scalar_type()),
                   op,
                   "q: expected a floating-point dtype (float32, float64, bfloat16, float16), got ",
                   q.scalar_type());
  TORCH_CHECK_TYPE(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(),
                   op,
                   "k, v: expected q's dtype ",
                   q.scalar_type(),
                   ", got ",
                   k.scalar_type(),
                   " and ",
                   v.scalar_type());
  TORCH_CHECK_VALUE(k.device() == q.device() && v.device() == q.device(),
                    op,
                    "k, v: expected q's device ",
                    q.device(),
                    ", got ",
                    k.device(),
                    " and ",
                    v.device());
  Call call;
  call.options = {text(variant), block, row_len, text(abstraction)};
  call.L = q.sym_size(2).guard_int(__FILE__, __LINE__);
  call.D = q.sym_size(3).guard_int(__FILE__, __LINE__);
  TORCH_CHECK_VALUE(call.D > 0, op, "q: expected D > 0, got shape ", q.sym_sizes());
  check_options(call.options, call.L);
  call.module = make_module(call.options, call.L, call.D);
  const auto wanted = learned_map_names(*call.module);
  const MaybeTensor* given[] = {&phi_query, &phi_key};
  for (int m = 0; m < 2; ++m) {
    const std::string name = kMapNames[m];
    const bool learns = std::find(wanted.begin(), wanted.end(), name) != wanted.end();
    const auto& phi = *given[m];
    TORCH_CHECK_VALUE(learns || !phi.has_value(),
                      op,
                      name,
                      ": '",
                      call.options.type,
                      "' with abstraction '",
                      call.options.abstraction,
                      "' learns no ",
                      name,
                      " (pass None)");
    TORCH_CHECK_VALUE(!learns || phi.has_value(),
                      op,
                      name,
                      ": '",
                      call.options.type,
                      "' with abstraction '",
                      call.options.abstraction,
                      "' learns ",
                      name,
                      ": pass a [D, D] = [",
                      call.D,
                      ", ",
                      call.D,
                      "] tensor");
    if (!phi) continue;
    TORCH_CHECK_VALUE(phi->dim() == 2 && phi->sym_size(0) == call.D && phi->sym_size(1) == call.D,
                      op,
                      name,
                      ": expected [D, D] = [",
                      call.D,
                      ", ",
                      call.D,
                      "], got ",
                      phi->sym_sizes());
    TORCH_CHECK_TYPE(at::isFloatingType(phi->scalar_type()),
                     op,
                     name,
                     ": expected a floating-point dtype, got ",
                     phi->scalar_type());
    TORCH_CHECK_VALUE(phi->device() == q.device(),
                      op,
                      name,
                      ": expected q's device ",
                      q.device(),
                      ", got ",
                      phi->device());
    call.maps[m] = phi;
  }
  call.empty = q.sym_size(0) == 0 || q.sym_size(1) == 0 || v.sym_size(3) == 0;
  return call;
}

void bind_maps(const Call& call) {
  for (auto& p : call.module->named_parameters(/*recurse=*/false))
    p.value().set_data(call.maps[p.key() == kMapNames[0] ? 0 : 1]->detach());
}

}  // namespace combiner::attention::op
