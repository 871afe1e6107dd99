// What runs the ops' kernels on host memory (tensors on the CPU): their CPU models, unless a table
// of other implementations is installed. The CPU build's tests install the CUDA kernels' own
// source run by the SIMT emulator (emulated/emulated.h), so the ops' tests and check tables run the
// kernels themselves. A null entry leaves that kernel's CPU model.
#pragma once

#include "ops/bias_grad_kernel.h"
#include "ops/cross_entropy_kernel.h"
#include "ops/layer_norm_kernel.h"
#include "ops/norm_linear_kernel.h"
#include "ops/weight_cast_kernel.h"

namespace combiner::ops {

struct HostKernels {
  void (*norm_forward)(const NormForward&, void* stream) = nullptr;
  void (*norm_backward)(const NormBackward&, void* stream) = nullptr;
  void (*norm_linear)(const NormLinear&, void* stream) = nullptr;
  void (*bias_grad)(const BiasGrad&, void* stream) = nullptr;
  void (*entropy_forward)(const EntropyForward&, void* stream) = nullptr;
  void (*entropy_backward)(const EntropyBackward&, void* stream) = nullptr;
  void (*weight_cast)(const WeightCast&, void* stream) = nullptr;
};

// Installs `kernels` (nullptr: the CPU models) and returns the table it replaces.
const HostKernels* set_host_kernels(const HostKernels* kernels);
const HostKernels* host_kernels();

}  // namespace combiner::ops
