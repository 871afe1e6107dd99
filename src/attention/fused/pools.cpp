// The fused path's max pools as autograd ops, one kernel forward and one backward each, on CUDA
// or the CPU model (fused/kernel_scan.h): the running max (RunningMax) and the max over whole
// segments of a [B, H, rows, D] tensor (SegmentMax). Saved for backward: x alone; the arg-maxes
// are found again by the same scan. (The pools a fused call makes itself: pool_stage.cpp.)
#include "attention/fused/fused.h"
#include "attention/fused/launch.h"
#include "attention/fused/pool_scans.h"

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
// contiguous block. Sets r's shape from x and `at` from its strides; false when the strides do
// not allow it (the caller copies x).
bool describe(const torch::Tensor& x, int64_t dim, fused::RunningMax& r, fused::ScanLayout& at) {
  if (dim > 3) return false;
  int64_t inner = 1;
  for (int64_t d = x.dim() - 1; d > dim; --d) {
    if (x.size(d) != 1 && x.stride(d) != inner) return false;
    inner *= x.size(d);
  }
  r.inner = inner;
  r.n = x.size(dim);
  at.step_stride = x.stride(dim);
  for (int64_t d = 0; d < 3; ++d) {
    r.outer[d] = 1;
    at.outer_stride[d] = 0;
  }
  for (int64_t d = 0; d < dim; ++d) {
    r.outer[3 - dim + d] = x.size(d);
    at.outer_stride[3 - dim + d] = x.stride(d);
  }
  return true;
}

fused::ScanLayout layout_of(const torch::Tensor& t, int64_t dim, int64_t scan) {
  fused::RunningMax shape;
  fused::ScanLayout at;
  const bool ok = describe(scan == dim ? t : t.movedim(dim, scan), scan, shape, at);
  TORCH_CHECK(ok, "running max: an output of strides ", t.strides(), " is not a line layout");
  return at;
}

int64_t scan_layout(torch::Tensor& x, int64_t dim, fused::RunningMax& r) {
  if (describe(x, dim, r, r.x_at)) return dim;
  const int64_t next_to_last = x.dim() - 2;
  if (dim < next_to_last) {
    auto moved = x.movedim(dim, next_to_last);
    if (describe(moved, next_to_last, r, r.x_at)) {
      x = moved;
      return next_to_last;
    }
  }
  x = x.contiguous();
  describe(x, dim, r, r.x_at);
  return dim;
}

torch::Tensor segments_of(const torch::Tensor& x, int64_t segments, int64_t len) {
  if (segments == 0) return x;
  return x.narrow(2, 0, segments * len).view({x.size(0), x.size(1), segments, len, x.size(3)});
}

// y (and, in backward, x's whole gradient) are written in the caller's axis order, contiguous:
// no copy of either, and where the scan covers whole segments of a [B, H, rows, D] x, the
// gradient is x's own shape (rows past the segments zero), not a slice's that autograd would
// zero-fill a whole-size tensor for, copy into and add.
class RunningMaxFunction : public torch::autograd::Function<RunningMaxFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x_in,
                               int64_t dim,
                               bool reverse,
                               int64_t segments,
                               int64_t len) {
    fused::RunningMax r;
    const auto scanned = segments_of(x_in, segments, len);
    auto x = scanned;
    const int64_t scan = scan_layout(x, dim, r);
    auto y =
        torch::empty(scanned.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
    r.y_at = layout_of(y, dim, scan);
    r.reverse = reverse;
    r.dtype = scan_dtype(x.scalar_type());
    r.x = x.data_ptr();
    r.y = y.data_ptr();
    fused_launch::running_max(x, fused::one_part(r));
    ctx->save_for_backward({x});  // what the kernel read: a view of x_in, unless it was copied
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["scan"] = scan;
    ctx->saved_data["reverse"] = reverse;
    ctx->saved_data["segments"] = segments;
    ctx->saved_data["len"] = len;
    ctx->saved_data["sizes"] = x_in.sizes().vec();
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    const int64_t dim = ctx->saved_data["dim"].toInt(), scan = ctx->saved_data["scan"].toInt();
    const int64_t segments = ctx->saved_data["segments"].toInt();
    const int64_t len = ctx->saved_data["len"].toInt();
    fused::RunningMax r;
    describe(x, scan, r, r.x_at);  // as in forward: x is the tensor forward scanned
    r.reverse = ctx->saved_data["reverse"].toBool();
    r.dtype = scan_dtype(x.scalar_type());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty(ctx->saved_data["sizes"].toIntVector(), dy.options());
    const auto dx_scanned = segments_of(dx, segments, len);
    r.y_at = layout_of(dy, dim, scan);
    r.dx_at = layout_of(dx_scanned, dim, scan);
    r.x = x.data_ptr();
    r.dy = dy.data_ptr();
    r.dx = dx.data_ptr();
    fused_launch::running_max_backward(x, fused::one_part(r));
    if (segments > 0 && dx.size(2) > segments * len)
      dx.narrow(2, segments * len, dx.size(2) - segments * len).zero_();
    return {dx, {}, {}, {}, {}};
  }
};

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

void set_dx(fused::SegmentMax& m, const torch::Tensor& dx) {
  m.dx = dx.data_ptr();
  for (int d = 0; d < 3; ++d) m.dx_stride[d] = dx.stride(d);
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
    fused_launch::segment_max(x, fused::one_part(m));
    ctx->save_for_backward({x});
    ctx->saved_data["segments"] = segments;
    ctx->saved_data["len"] = len;
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto x = ctx->get_saved_variables()[0];
    auto m = segment_max_of(x, ctx->saved_data["segments"].toInt(), ctx->saved_data["len"].toInt());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    auto dx = torch::empty(x.sizes(), dy.options());
    m.dy = dy.data_ptr();
    set_dx(m, dx);
    fused_launch::segment_max_backward(x, fused::one_part(m));
    return {dx, {}, {}};
  }
};

}  // namespace pools_detail

namespace {
bool scan_dtype_ok(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return t == torch::kFloat || t == torch::kBFloat16 || (t == torch::kDouble && !x.is_cuda());
}
}  // namespace

torch::Tensor fused_running_max(const torch::Tensor& x, int64_t dim, bool reverse) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TORCH_CHECK(d >= 0 && d < x.dim(), "running max: dim ", dim, " of a ", x.dim(), "-d tensor");
  if (!scan_dtype_ok(x) || x.numel() == 0) return cumulative_max(x, d, reverse, false);
  return pools_detail::RunningMaxFunction::apply(x, d, reverse, 0, 1);
}

torch::Tensor fused_running_max_of_segments(
    const torch::Tensor& x, int64_t segments, int64_t len, int64_t dim, bool reverse) {
  TORCH_CHECK(x.dim() == 4, "running max of segments: x must be [B, H, rows, D], got ", x.sizes());
  TORCH_CHECK(len >= 1 && segments >= 1 && segments * len <= x.size(2),
              "running max of segments: ",
              segments,
              " segments of ",
              len,
              " rows do not fit ",
              x.size(2));
  TORCH_CHECK(dim == 2 || dim == 3, "running max of segments: dim must be 2 or 3, got ", dim);
  if (!scan_dtype_ok(x) || x.numel() == 0)
    return cumulative_max(pools_detail::segments_of(x, segments, len), dim, reverse, false);
  return pools_detail::RunningMaxFunction::apply(x, dim, reverse, segments, len);
}

torch::Tensor fused_segment_max(const torch::Tensor& x, int64_t segments, int64_t len) {
  TORCH_CHECK(x.dim() == 4, "segment max: x must be [B, H, rows, D], got ", x.sizes());
  TORCH_CHECK(len >= 1 && segments >= 0 && segments * len <= x.size(2),
              "segment max: ",
              segments,
              " segments of ",
              len,
              " rows do not fit ",
              x.size(2));
  if (!scan_dtype_ok(x) || segments == 0 || x.size(3) == 0) {  // LibTorch's pool of the segments
    return std::get<0>(x.narrow(2, 0, segments * len)
                           .reshape({x.size(0), x.size(1), segments, len, x.size(3)})
                           .max(3));
  }
  return pools_detail::SegmentMaxFunction::apply(x, segments, len);
}

}  // namespace combiner::attention
