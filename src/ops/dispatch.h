// Where an op of this folder runs its kernel: on a CUDA tensor the CUDA kernel, on its device and
// current stream (CUDA builds; COMBINER_WITH_CUDA_OPS, defined for this folder's sources); on a
// CPU tensor the installed host kernel (ops/host_kernels.h: the emulated CUDA source in the CPU
// build's tests) or else the kernel's CPU model. `launched` counts what a GPU would launch.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>
#include <string>

#include "ops/host_kernels.h"

#ifdef COMBINER_WITH_CUDA_OPS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

// &kernel where the build has the CUDA kernels, else null.
#ifdef COMBINER_WITH_CUDA_OPS
#define COMBINER_OPS_CUDA(kernel) (&kernel)
#else
#define COMBINER_OPS_CUDA(kernel) nullptr
#endif

namespace combiner::ops {

template <typename Arg>
struct Kernel {
  void (*cpu)(const Arg&);
  void (*cuda)(const Arg&, void* stream);  // null where the build has no CUDA kernels
  void (*HostKernels::*host)(const Arg&, void* stream);
  int launches;    // on a GPU
  const char* op;  // the op's name, for the error where no CUDA kernel is built
};

template <typename Arg>
void run_kernel(const Kernel<Arg>& kernel,
                const torch::Tensor& on,
                const Arg& arg,
                std::atomic<int64_t>& launched) {
  launched += kernel.launches;
  if (!on.is_cuda()) {
    const HostKernels* installed = host_kernels();
    if (installed && installed->*kernel.host) return (installed->*kernel.host)(arg, nullptr);
    return kernel.cpu(arg);
  }
  if (kernel.cuda == nullptr)
    throw std::invalid_argument(std::string(kernel.op) + ": this build has no CUDA kernels");
#ifdef COMBINER_WITH_CUDA_OPS
  const c10::cuda::CUDAGuard guard(on.device());
  kernel.cuda(arg, c10::cuda::getCurrentCUDAStream(on.device().index()).stream());
#endif
}

}  // namespace combiner::ops
