#include "tools/launch_count.h"

#include <ATen/record_function.h>

#include <mutex>
#include <set>
#include <vector>

#include "attention/fused/fused.h"
#include "ops/cross_entropy.h"
#include "ops/layer_norm.h"
#include "ops/linear.h"
#include "ops/norm_linear.h"
#include "ops/weight_cast.h"

namespace combiner::tools {

namespace launch_count_detail {

// Ops that never launch a kernel: views and aliases, shape metadata, allocations left
// uninitialised, and the composite wrappers that return their input unchanged when they are a
// leaf (contiguous of a contiguous tensor, to() to its own dtype).
const std::set<std::string>& no_work() {
  static const std::set<std::string> names = {
      "aten::empty",
      "aten::empty_like",
      "aten::empty_strided",
      "aten::view",
      "aten::_reshape_alias",
      "aten::reshape",
      "aten::as_strided",
      "aten::t",
      "aten::transpose",
      "aten::permute",
      "aten::unsqueeze",
      "aten::squeeze",
      "aten::select",
      "aten::slice",
      "aten::narrow",
      "aten::expand",
      "aten::expand_as",
      "aten::detach",
      "aten::alias",
      "aten::resize_",
      "aten::set_",
      "aten::unflatten",
      "aten::flatten",
      "aten::view_as",
      "aten::contiguous",
      "aten::to",
      "aten::lift_fresh",
      "aten::result_type",
      "aten::size",
      "aten::stride",
      "aten::is_nonzero",
      "aten::unbind",
      "aten::split",
      "aten::chunk",
      "aten::detach_",
      "aten::_unsafe_view",
      "aten::unfold",
      "aten::movedim",
      "aten::numpy_T",
      "aten::split_with_sizes",
      "aten::_has_compatible_shallow_copy_type",
      "aten::requires_grad_",
      "aten::as_strided_",
      "aten::squeeze_",
      "aten::unsqueeze_",
      "aten::t_",
      "aten::transpose_",
      "aten::conj",
      "aten::resolve_conj",
      "aten::resolve_neg",  // no-ops without the conjugate / negative bit
  };
  return names;
}

// Per thread, the ops open right now, each with whether an op inside it launched work (then the
// work is counted there, not again for the caller: aten::matmul is its aten::mm, aten::max on
// the CPU resizes its output with a view op and is still one launch).
struct Frame {
  bool work_inside = false;
};
thread_local std::vector<Frame> open_ops;

struct Totals {
  std::mutex mutex;
  std::map<std::string, int64_t> ops;
  int64_t count = 0;
};
Totals* active = nullptr;  // one counter at a time

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) {
  open_ops.push_back({});
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  if (open_ops.empty()) return;  // began before the counter did
  const bool counted_inside = open_ops.back().work_inside;
  open_ops.pop_back();
  const bool counts = !counted_inside && LaunchCounter::launches_work(fn.name());
  if (!open_ops.empty() && (counts || counted_inside)) open_ops.back().work_inside = true;
  if (!counts || active == nullptr) return;
  const std::lock_guard<std::mutex> lock(active->mutex);
  active->ops[fn.name()] += 1;
  active->count += 1;
}

}  // namespace launch_count_detail

using namespace launch_count_detail;

namespace {
// Both fused families: the attention kernels and the model's (LayerNorm, the bias gradients,
// the loss, the weights' bf16 copies).
int64_t fused_launches() {
  return attention::fused_kernel_launches() + ops::norm_kernel_launches() +
         ops::norm_linear_launches() + ops::bias_grad_launches() + ops::cross_entropy_launches() +
         ops::weight_cast_launches();
}
}  // namespace

struct LaunchCounter::State {
  Totals totals;
  at::CallbackHandle handle = 0;
  int64_t fused_start = 0;
};

const std::set<std::string>& LaunchCounter::no_work_ops() {
  return no_work();
}

bool LaunchCounter::launches_work(const std::string& op) {
  // Only ATen ops run on a device; the autograd engine's records (evaluate_function: ...,
  // detach of saved tensors) only call them.
  return op.rfind("aten::", 0) == 0 && no_work().count(op) == 0;
}

LaunchCounter::LaunchCounter() : state_(std::make_unique<State>()) {
  TORCH_CHECK(active == nullptr, "LaunchCounter: one counter at a time");
  active = &state_->totals;
  state_->fused_start = fused_launches();
  state_->handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_start, &on_end).scopes({at::RecordScope::FUNCTION}));
}

LaunchCounter::~LaunchCounter() {
  at::removeCallback(state_->handle);
  active = nullptr;
}

int64_t LaunchCounter::fused() const {
  return fused_launches() - state_->fused_start;
}

int64_t LaunchCounter::launches() const {
  const std::lock_guard<std::mutex> lock(state_->totals.mutex);
  return state_->totals.count + fused();
}

std::map<std::string, int64_t> LaunchCounter::ops() const {
  const std::lock_guard<std::mutex> lock(state_->totals.mutex);
  return state_->totals.ops;
}

}  // namespace combiner::tools
