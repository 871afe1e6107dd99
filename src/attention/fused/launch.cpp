#include "attention/fused/launch.h"

#include <atomic>

#include "attention/fused/fused.h"

#ifdef COMBINER_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace combiner::attention {

namespace fused_launch {

namespace {

std::atomic<int64_t> launched{0};  // kernels launched (CUDA) or modelled (CPU)

// A CUDA kernel's host function, or nullptr in a build without the kernels (a parameter type
// that takes no part in deducing Arg, so that nullptr is accepted).
template <typename Arg>
struct CudaFn {
  using type = void (*)(const Arg&, void*);
};
#ifdef COMBINER_WITH_CUDA_KERNELS
#define COMBINER_CUDA(fn) (&fused::fn)
#else
#define COMBINER_CUDA(fn) nullptr
#endif

template <typename Arg>
void run(const torch::Tensor& on,
         const Arg& arg,
         int64_t launches,
         void (*cpu)(const Arg&),
         typename CudaFn<Arg>::type cuda) {
  launched += launches;
  if (!on.is_cuda()) return cpu(arg);
#ifdef COMBINER_WITH_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(on.device());
  cuda(arg, c10::cuda::getCurrentCUDAStream(on.device().index()).stream());
#else
  (void)cuda;
  TORCH_CHECK(false, "fused attention: this build has no CUDA kernels (", on.device(), ")");
#endif
}

}  // namespace

void forward(const torch::Tensor& on, const fused::Forward& f) {
  run(on, f, 1, &fused::forward_cpu, COMBINER_CUDA(forward_cuda));
}
void delta(const torch::Tensor& on, const fused::Delta& d) {
  run(on, d, 1, &fused::delta_cpu, COMBINER_CUDA(delta_cuda));
}
void backward(const torch::Tensor& on, const fused::Backward& b) {
  run(on, b, fused::backward_launches(b), &fused::backward_cpu, COMBINER_CUDA(backward_cuda));
}
void running_max(const torch::Tensor& on, const fused::RunningMax& r) {
  run(on, r, 1, &fused::running_max_forward_cpu, COMBINER_CUDA(running_max_forward_cuda));
}
void running_max_backward(const torch::Tensor& on, const fused::RunningMax& r) {
  run(on, r, 1, &fused::running_max_backward_cpu, COMBINER_CUDA(running_max_backward_cuda));
}
void segment_max(const torch::Tensor& on, const fused::SegmentMax& m) {
  run(on, m, 1, &fused::segment_max_forward_cpu, COMBINER_CUDA(segment_max_forward_cuda));
}
void segment_max_backward(const torch::Tensor& on, const fused::SegmentMax& m) {
  run(on, m, 1, &fused::segment_max_backward_cpu, COMBINER_CUDA(segment_max_backward_cuda));
}

#undef COMBINER_CUDA

}  // namespace fused_launch

int64_t fused_kernel_launches() {
  return fused_launch::launched.load();
}

}  // namespace combiner::attention
