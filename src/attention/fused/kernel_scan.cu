// The running max and the segment max of fused/kernel.h (RunningMax, SegmentMax), line for line
// the CPU model's running_max_*_all and segment_max_*_all (fused/kernel_cpu.cpp), the parts of a
// launch (ScanParts: a fused call's pools) one after another in its lines: one thread per
// line, consecutive threads on consecutive inner elements (coalesced), each walking its steps
// kStepChunk at a time: the chunk's loads are all issued before its first use (the pointers are
// __restrict__, so a store cannot order the next loads behind it), which keeps kStepChunk loads
// of a line in flight rather than one, where a step is a round trip to memory.
// Memory bound: the forward reads x and writes y once, the backward reads x and dy and writes dx
// once, where LibTorch's cummax path runs a scan with indices, then (backward) a scan again,
// zeros, a scatter-add, a cast and flips per slice, and a pool of a narrowed view zero-fills and
// scatters its gradient, then zero-fills a whole-size one and copies into its slice.

#include "attention/fused/kernel.h"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_scalar.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {
namespace {

constexpr int kStepChunk = 8;

// This thread's scan of the launch's parts, and its line there (nullptr: past the last line).
template <typename Scan>
__device__ __forceinline__ const Scan* scan_of(const ScanParts<Scan>& s,
                                               bool backward,
                                               int64_t& line) {
  line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const Scan& scan = s.part[scan_part(s, backward, line)];
  return line < scan_lines(scan, backward) ? &scan : nullptr;
}

template <typename T>
__global__ void __launch_bounds__(128)
    running_max_forward_kernel(const __grid_constant__ RunningMaxes parts) {
  int64_t line = 0;
  const RunningMax* scan = scan_of(parts, false, line);
  if (!scan) return;
  const RunningMax& r = *scan;
  const T* __restrict__ x = static_cast<const T*>(r.x) + running_max_start(r, r.x_at, line);
  T* __restrict__ y = static_cast<T*>(r.y) + running_max_start(r, r.y_at, line);
  const int64_t xs = r.x_at.step_stride, ys = r.y_at.step_stride;
  float best = 0.f;
  for (int64_t k0 = 0; k0 < r.n; k0 += kStepChunk) {
    float v[kStepChunk];
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i)
      if (k0 + i < r.n) v[i] = scalar_float(x[running_max_step(r, k0 + i) * xs]);
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i) {
      const int64_t k = k0 + i;
      if (k >= r.n) break;
      if (running_max_takes(k, v[i], best)) best = v[i];
      y[running_max_step(r, k) * ys] = scalar_as<T>(best);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(128)
    running_max_backward_kernel(const __grid_constant__ RunningMaxes parts) {
  int64_t line = 0;
  const RunningMax* scan = scan_of(parts, true, line);
  if (!scan) return;
  const RunningMax& r = *scan;
  const T* __restrict__ x = static_cast<const T*>(r.x) + running_max_start(r, r.x_at, line);
  const T* __restrict__ dy = static_cast<const T*>(r.dy) + running_max_start(r, r.y_at, line);
  T* __restrict__ dx = static_cast<T*>(r.dx) + running_max_start(r, r.dx_at, line);
  const int64_t xs = r.x_at.step_stride, ys = r.y_at.step_stride, ds = r.dx_at.step_stride;
  // Step t's gradient: `sum` stored, or added to what dx holds (this thread owns the line).
  const auto put = [&](int64_t t, float sum) {
    T& out = dx[t * ds];
    out = scalar_as<T>(r.accumulate ? scalar_float(out) + sum : sum);
  };
  float best = 0.f, sum = 0.f;
  int64_t at = 0;
  for (int64_t k0 = 0; k0 < r.n; k0 += kStepChunk) {
    float v[kStepChunk], g[kStepChunk];
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i)
      if (k0 + i < r.n) {
        const int64_t t = running_max_step(r, k0 + i);
        v[i] = scalar_float(x[t * xs]);
        g[i] = scalar_float(dy[t * ys]);
      }
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i) {
      const int64_t k = k0 + i;
      if (k >= r.n) break;
      const int64_t t = running_max_step(r, k);
      if (running_max_takes(k, v[i], best)) {
        if (k > 0) put(at, sum);
        best = v[i];
        at = t;
        sum = 0.f;
      } else if (!r.accumulate) {
        put(t, 0.f);
      }
      sum += g[i];
    }
  }
  if (r.n > 0) put(at, sum);
}

// The max of one segment's m.len steps from `in` (m.stride[2] apart) into `best`, and the step
// that holds it, as segment_max_takes picks them (the first, or the first NaN).
template <typename T>
__device__ __forceinline__ int64_t segment_arg_max(const T* __restrict__ in,
                                                   const SegmentMax& m,
                                                   float& best) {
  int64_t at = -1;
  for (int64_t t0 = 0; t0 < m.len; t0 += kStepChunk) {
    float v[kStepChunk];
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i)
      if (t0 + i < m.len) v[i] = scalar_float(in[(t0 + i) * m.stride[2]]);
#pragma unroll
    for (int i = 0; i < kStepChunk; ++i)
      if (t0 + i < m.len && segment_max_takes(t0 + i, v[i], best)) {
        best = v[i];
        at = t0 + i;
      }
  }
  return at;
}

template <typename T>
__global__ void __launch_bounds__(128)
    segment_max_forward_kernel(const __grid_constant__ SegmentMaxes parts) {
  int64_t line = 0;
  const SegmentMax* scan = scan_of(parts, false, line);
  if (!scan) return;
  const SegmentMax& m = *scan;
  const T* x = static_cast<const T*>(m.x);
  const int64_t d = line % m.dim, g = line / m.dim % m.segments;
  const int64_t bh = line / m.dim / m.segments, b = bh / m.heads, h = bh % m.heads;
  float best = 0.f;
  segment_arg_max(x + b * m.stride[0] + h * m.stride[1] + g * m.len * m.stride[2] + d, m, best);
  static_cast<T*>(m.y)[line] = scalar_as<T>(best);
}

template <typename T>
__global__ void __launch_bounds__(128)
    segment_max_backward_kernel(const __grid_constant__ SegmentMaxes parts) {
  int64_t line = 0;
  const SegmentMax* scan = scan_of(parts, true, line);
  if (!scan) return;
  const SegmentMax& m = *scan;
  const T* x = static_cast<const T*>(m.x);
  const int64_t groups = (m.rows + m.len - 1) / m.len;
  const int64_t d = line % m.dim, g = line / m.dim % groups;
  const int64_t bh = line / m.dim / groups, b = bh / m.heads, h = bh % m.heads;
  const int64_t first = g * m.len, count = min(m.len, m.rows - first);
  T* __restrict__ out =
      static_cast<T*>(m.dx) + b * m.dx_stride[0] + h * m.dx_stride[1] + first * m.dx_stride[2] + d;
  float best = 0.f;
  const int64_t at =
      g < m.segments ? segment_arg_max(
                           x + b * m.stride[0] + h * m.stride[1] + first * m.stride[2] + d, m, best)
                     : -1;
  const float grad = at < 0 ? 0.f : segment_max_dy<T>(m, bh, g, d);
  if (m.accumulate) {
    if (at >= 0)
      out[at * m.dx_stride[2]] = scalar_as<T>(scalar_float(out[at * m.dx_stride[2]]) + grad);
    return;
  }
  for (int64_t t = 0; t < count; ++t) out[t * m.dx_stride[2]] = scalar_as<T>(t == at ? grad : 0.f);
}

template <typename Fn>
void dispatch_storage(Dtype dtype, const char* what, Fn&& fn) {
  if (dtype == Dtype::kBFloat16) return fn(Type<__nv_bfloat16>{});
  if (dtype == Dtype::kFloat32) return fn(Type<float>{});
  throw std::invalid_argument(std::string(what) + ": the CUDA kernels take float32 or bfloat16");
}

template <typename Scan>
dim3 line_grid(const ScanParts<Scan>& s, bool backward) {
  return dim3(unsigned(ceil_div(scan_lines(s, backward), 128)));
}

}  // namespace
}  // namespace combiner::attention::fused::cuda_detail

namespace combiner::attention::fused {

void running_max_forward_cuda(const RunningMaxes& r, void* stream) {
  using namespace cuda_detail;
  dispatch_storage(r.part[0].dtype, "running max", [&](auto type) {
    using T = typename decltype(type)::type;
    launch(running_max_forward_kernel<T>, line_grid(r, false), 0, stream, "running max", r);
  });
}

void running_max_backward_cuda(const RunningMaxes& r, void* stream) {
  using namespace cuda_detail;
  dispatch_storage(r.part[0].dtype, "running max backward", [&](auto type) {
    using T = typename decltype(type)::type;
    launch(
        running_max_backward_kernel<T>, line_grid(r, true), 0, stream, "running max backward", r);
  });
}

void segment_max_forward_cuda(const SegmentMaxes& m, void* stream) {
  using namespace cuda_detail;
  dispatch_storage(m.part[0].dtype, "segment max", [&](auto type) {
    using T = typename decltype(type)::type;
    launch(segment_max_forward_kernel<T>, line_grid(m, false), 0, stream, "segment max", m);
  });
}

void segment_max_backward_cuda(const SegmentMaxes& m, void* stream) {
  using namespace cuda_detail;
  dispatch_storage(m.part[0].dtype, "segment max backward", [&](auto type) {
    using T = typename decltype(type)::type;
    launch(
        segment_max_backward_kernel<T>, line_grid(m, true), 0, stream, "segment max backward", m);
  });
}

}  // namespace combiner::attention::fused
