#include "model/precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

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
