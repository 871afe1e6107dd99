// The running max of the fused path (fused/kernel.h RunningMax) as an autograd op: one kernel
// forward and one backward, on CUDA or the CPU model; saved for backward: x alone (the arg-maxes
// are found again by the same scan, as cumulative_max does without indices).
#include "attention/fused/checks.h"
#include "attention/fused/fused.h"

#ifdef COMBINER_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace combiner::attention {

namespace running_max_detail {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

fused::Dtype scan_dtype(torch::ScalarType t) {
  return t == torch::kBFloat16 ? fused::Dtype::kBFloat16
         : t == torch::kDouble ? fused::Dtype::kFloat64
                               : fused::Dtype::kFloat32;
}

// x as RunningMax lines along `dim`: at most three axes before it, the axes after it one
// contiguous block. Returns false when x's strides do not allow it (the caller copies x).
bool describe(const torch::Tensor& x, int64_t dim, fused::RunningMax& r) {
  if (dim > 3) return false;
  int64_t inner = 1;
  for (int64_t d = x.dim() - 1; d > dim; --d) {
    if (x.size(d) != 1 && x.stride(d) != inner) return false;
    inner *= x.size(d);
  }
  r.inner = inner;
  r.n = x.size(dim);
  r.step_stride = x.stride(dim);
  for (int64_t d = 0; d < dim; ++d) {
    r.outer[3 - dim + d] = x.size(d);
    r.outer_stride[3 - dim + d] = x.stride(d);
  }
  return true;
}

void run(const torch::Tensor& x, const fused::RunningMax& r, bool backward) {
  fused_glue::count_launches(1);
  if (!x.is_cuda()) {
    return backward ? fused::running_max_backward_cpu(r) : fused::running_max_forward_cpu(r);
  }
#ifdef COMBINER_WITH_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(x.device());
  void* stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
  backward ? fused::running_max_backward_cuda(r, stream) : fused::running_max_forward_cuda(r, stream);
#else
  TORCH_CHECK(false, "running max: this build has no CUDA kernels (", x.device(), ")");
#endif
}

class RunningMaxFunction : public torch::autograd::Function<RunningMaxFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               int64_t dim,
                               bool reverse) {
    fused::RunningMax r;
    auto x = x_in;
    if (!describe(x, dim, r)) {
      x = x.contiguous();
      describe(x, dim, r);
    }
    r.reverse = reverse;
    r.dtype = scan_dtype(x.scalar_type());
    auto y = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
    r.x = x.data_ptr();
    r.y = y.data_ptr();
    run(x, r, /*backward=*/false);
    ctx->save_for_backward({x});
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reverse"] = reverse;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt();
    fused::RunningMax r;
    describe(x, dim, r);  // as in forward: x is the tensor forward scanned
    r.reverse = ctx->saved_data["reverse"].toBool();
    r.dtype = scan_dtype(x.scalar_type());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty(x.sizes(), dy.options());
    r.x = x.data_ptr();
    r.dy = dy.data_ptr();
    r.dx = dx.data_ptr();
    run(x, r, /*backward=*/true);
    return {dx, {}, {}};
  }
};

}  // namespace running_max_detail

torch::Tensor fused_running_max(const torch::Tensor& x, int64_t dim, bool reverse) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TORCH_CHECK(d >= 0 && d < x.dim(), "running max: dim ", dim, " of a ", x.dim(), "-d tensor");
  const auto t = x.scalar_type();
  const bool kernel_dtype = t == torch::kFloat || t == torch::kBFloat16 ||
                            (t == torch::kDouble && !x.is_cuda());
  if (!kernel_dtype || x.numel() == 0) return cumulative_max(x, d, reverse, false);
  return running_max_detail::RunningMaxFunction::apply(x, d, reverse);
}

}  // namespace combiner::attention
