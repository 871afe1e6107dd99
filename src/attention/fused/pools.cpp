// The fused path's max pools as autograd ops, one kernel forward and one backward each, on CUDA
// or the CPU model (fused/kernel.h): the running max (RunningMax) and the max over whole
// segments of a [B, H, rows, D] tensor (SegmentMax). Saved for backward: x alone; the arg-maxes
// are found again by the same scan.
#include "attention/fused/fused.h"
#include "attention/fused/launch.h"

namespace combiner::attention {

namespace pools_detail {

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

// The axis x is scanned along, as the kernel reads x: x itself where describe() takes it; else,
// where only the axes between `dim` and the last break the inner block (the axial variants' rows
// of a q or k that is a view of the fused qkv projection, whose column stride is 3 x width), `dim`
// moved next to the last axis, so those axes become outer ones and x is read in place; else a
// contiguous copy. Returns the scan axis; x is replaced by what the kernel reads.
int64_t scan_layout(torch::Tensor& x, int64_t dim, fused::RunningMax& r) {
  if (describe(x, dim, r)) return dim;
  const int64_t next_to_last = x.dim() - 2;
  if (dim < next_to_last) {
    auto moved = x.movedim(dim, next_to_last);
    if (describe(moved, next_to_last, r)) {
      x = moved;
      return next_to_last;
    }
  }
  x = x.contiguous();
  describe(x, dim, r);
  return dim;
}

class RunningMaxFunction : public torch::autograd::Function<RunningMaxFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               int64_t dim,
                               bool reverse) {
    fused::RunningMax r;
    auto x = x_in;
    const int64_t scan = scan_layout(x, dim, r);
    r.reverse = reverse;
    r.dtype = scan_dtype(x.scalar_type());
    auto y = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
    r.x = x.data_ptr();
    r.y = y.data_ptr();
    fused_launch::running_max(x, r);
    ctx->save_for_backward({x});  // a view of x_in, unless it had to be copied
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["scan"] = scan;
    ctx->saved_data["reverse"] = reverse;
    return scan == dim ? y : y.movedim(scan, dim);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt(), scan = ctx->saved_data["scan"].toInt();
    fused::RunningMax r;
    describe(x, scan, r);  // as in forward: x is the tensor forward scanned
    r.reverse = ctx->saved_data["reverse"].toBool();
    r.dtype = scan_dtype(x.scalar_type());
    const auto g = scan == dim ? grads[0] : grads[0].movedim(dim, scan);
    const auto dy = g.to(x.scalar_type()).contiguous();
    auto dx = torch::empty(x.sizes(), dy.options());
    r.x = x.data_ptr();
    r.dy = dy.data_ptr();
    r.dx = dx.data_ptr();
    fused_launch::running_max_backward(x, r);
    return {scan == dim ? dx : dx.movedim(scan, dim), {}, {}};
  }
};

// x [B, H, rows, D] with D contiguous, as SegmentMax reads it.
fused::SegmentMax segment_max_of(const torch::Tensor& x, int64_t segments, int64_t len) {
  fused::SegmentMax m;
  m.batch = x.size(0);
  m.heads = x.size(1);
  m.rows = x.size(2);
  m.dim = x.size(3);
  m.segments = segments;
  m.len = len;
  for (int d = 0; d < 3; ++d) m.stride[d] = x.stride(d);
  m.dtype = scan_dtype(x.scalar_type());
  m.x = x.data_ptr();
  return m;
}

class SegmentMaxFunction : public torch::autograd::Function<SegmentMaxFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               int64_t segments,
                               int64_t len) {
    const auto x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
    auto m = segment_max_of(x, segments, len);
    auto y = torch::empty({m.batch, m.heads, segments, m.dim}, x.options());
    m.y = y.data_ptr();
    fused_launch::segment_max(x, m);
    ctx->save_for_backward({x});
    ctx->saved_data["segments"] = segments;
    ctx->saved_data["len"] = len;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    auto m = segment_max_of(
        x, ctx->saved_data["segments"].toInt(), ctx->saved_data["len"].toInt());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty(x.sizes(), dy.options());
    m.dy = dy.data_ptr();
    m.dx = dx.data_ptr();
    fused_launch::segment_max_backward(x, m);
    return {dx, {}, {}};
  }
};

}  // namespace pools_detail

torch::Tensor fused_running_max(const torch::Tensor& x, int64_t dim, bool reverse) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TORCH_CHECK(d >= 0 && d < x.dim(), "running max: dim ", dim, " of a ", x.dim(), "-d tensor");
  const auto t = x.scalar_type();
  const bool kernel_dtype = t == torch::kFloat || t == torch::kBFloat16 ||
                            (t == torch::kDouble && !x.is_cuda());
  if (!kernel_dtype || x.numel() == 0) return cumulative_max(x, d, reverse, false);
  return pools_detail::RunningMaxFunction::apply(x, d, reverse);
}

torch::Tensor fused_segment_max(const torch::Tensor& x, int64_t segments, int64_t len) {
  TORCH_CHECK(x.dim() == 4, "segment max: x must be [B, H, rows, D], got ", x.sizes());
  TORCH_CHECK(len >= 1 && segments >= 0 && segments * len <= x.size(2),
              "segment max: ", segments, " segments of ", len, " rows do not fit ", x.size(2));
  const auto t = x.scalar_type();
  const bool kernel_dtype = t == torch::kFloat || t == torch::kBFloat16 ||
                            (t == torch::kDouble && !x.is_cuda());
  if (!kernel_dtype || segments == 0 || x.size(3) == 0) {  // LibTorch's pool of the segments
    return std::get<0>(
        x.narrow(2, 0, segments * len)
            .reshape({x.size(0), x.size(1), segments, len, x.size(3)})
            .max(3));
  }
  return pools_detail::SegmentMaxFunction::apply(x, segments, len);
}

}  // namespace combiner::attention
