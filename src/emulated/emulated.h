// The CUDA kernels' own source, run by the SIMT emulator (simt/emulator.h), installed as what
// runs the fused attention's and the ops' kernels on CPU tensors (fused_launch::HostKernels,
// ops::HostKernels) while an EmulatedKernels lives: kernel-check's tables (the attention kernels,
// LayerNorm, the bias gradients, norm + linear, the decode step) then run the kernels themselves,
// not their CPU models. Slow (every CUDA thread a fiber, every barrier a switch of stacks): test
// shapes.
#pragma once

#include "attention/fused/launch.h"
#include "ops/host_kernels.h"

namespace combiner::emulated {

class EmulatedKernels {
 public:
  EmulatedKernels();
  ~EmulatedKernels();
  EmulatedKernels(const EmulatedKernels&) = delete;
  EmulatedKernels& operator=(const EmulatedKernels&) = delete;

 private:
  const attention::fused_launch::HostKernels* attention_;  // what it replaced
  const ops::HostKernels* ops_;
};

}  // namespace combiner::emulated
