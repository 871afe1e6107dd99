#include "model/precision.h"

#include <ATen/autocast_mode.h>

namespace combiner::model {

bool autocast_enabled(const torch::Device& device) {
  return device.is_cuda() ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}

AutocastGuard::AutocastGuard(bool enabled, const torch::Device& device)
    : cuda_(device.is_cuda()), enabled_(enabled), previous_(autocast_enabled(device)) {
  previous_dtype_ =
      cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
  if (cuda_) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
  if (enabled_) at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // The cast weights are cached while any autocast scope is open; drop them with the last one.
  if (enabled_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  if (cuda_) {
    at::autocast::set_enabled(previous_);
    at::autocast::set_autocast_gpu_dtype(previous_dtype_);
  } else {
    at::autocast::set_cpu_enabled(previous_);
    at::autocast::set_autocast_cpu_dtype(previous_dtype_);
  }
}

}  // namespace combiner::model
