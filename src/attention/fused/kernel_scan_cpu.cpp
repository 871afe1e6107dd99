// The CPU model of the scan kernels (kernel_scan.cu): the running max and the segment max of
// fused/kernel.h (RunningMax, SegmentMax), one line at a time, with the kernels' rules for ties,
// NaN and the backward's arg-max found again by the same scan. Storage S, arithmetic T as in
// kernel_cpu.cpp.
#include "attention/fused/cpu_dispatch.h"
#include "attention/fused/kernel.h"
#include "attention/fused/kernel_cpu.h"

#include <cstdint>

#include "util/bfloat16.h"

namespace combiner::attention::fused {

namespace cpu_model {
namespace {

using util::to_math;
using util::to_storage;

template <typename S, typename T>
void running_max_forward_all(const RunningMax& r) {
  const S* x = static_cast<const S*>(r.x);
  S* y = static_cast<S*>(r.y);
  for (int64_t line = 0; line < running_max_lines(r); ++line) {
    const int64_t x0 = running_max_start(r, r.x_at, line), y0 = running_max_start(r, r.y_at, line);
    T best = 0;
    for (int64_t k = 0; k < r.n; ++k) {
      const int64_t t = running_max_step(r, k);
      const T v = to_math<S, T>(x[x0 + t * r.x_at.step_stride]);
      if (running_max_takes(k, v, best)) best = v;
      y[y0 + t * r.y_at.step_stride] = to_storage<S, T>(best);
    }
  }
}

template <typename S, typename T>
void running_max_backward_all(const RunningMax& r) {
  const S* x = static_cast<const S*>(r.x);
  const S* dy = static_cast<const S*>(r.dy);
  S* dx = static_cast<S*>(r.dx);
  for (int64_t line = 0; line < running_max_lines(r); ++line) {
    const int64_t x0 = running_max_start(r, r.x_at, line);
    const int64_t y0 = running_max_start(r, r.y_at, line);
    const int64_t d0 = running_max_start(r, r.dx_at, line);
    // Scan step k's gradient: `sum` stored, or added to what dx holds.
    const auto put = [&](int64_t k, T sum) {
      S& out = dx[d0 + running_max_step(r, k) * r.dx_at.step_stride];
      out = to_storage<S, T>(r.accumulate ? to_math<S, T>(out) + sum : sum);
    };
    running_max_backward_line<T>(
        r.n,
        [&](int64_t k) {
          return to_math<S, T>(x[x0 + running_max_step(r, k) * r.x_at.step_stride]);
        },
        [&](int64_t k) {
          return to_math<S, T>(dy[y0 + running_max_step(r, k) * r.y_at.step_stride]);
        },
        put,
        [&](int64_t k) {
          if (!r.accumulate) put(k, T(0));
        });
  }
}

template <typename S, typename T>
void segment_max_forward_all(const SegmentMax& m) {
  const S* x = static_cast<const S*>(m.x);
  S* y = static_cast<S*>(m.y);
  for (int64_t line = 0; line < segment_max_lines(m, false); ++line) {
    const int64_t d = line % m.dim, g = line / m.dim % m.segments;
    const int64_t bh = line / m.dim / m.segments, b = bh / m.heads, h = bh % m.heads;
    const S* in = x + b * m.stride[0] + h * m.stride[1] + g * m.len * m.stride[2] + d;
    T best = 0;
    for (int64_t t = 0; t < m.len; ++t) {
      const T v = to_math<S, T>(in[t * m.stride[2]]);
      if (segment_max_takes(t, v, best)) best = v;
    }
    y[line] = to_storage<S, T>(best);
  }
}

template <typename S, typename T>
void segment_max_backward_all(const SegmentMax& m) {
  const S* x = static_cast<const S*>(m.x);
  S* dx = static_cast<S*>(m.dx);
  const int64_t groups = (m.rows + m.len - 1) / m.len;
  for (int64_t line = 0; line < segment_max_lines(m, true); ++line) {
    const int64_t d = line % m.dim, g = line / m.dim % groups;
    const int64_t bh = line / m.dim / groups, b = bh / m.heads, h = bh % m.heads;
    const int64_t first = g * m.len, count = std::min(m.len, m.rows - first);
    const S* in = x + b * m.stride[0] + h * m.stride[1] + first * m.stride[2] + d;
    S* out = dx + b * m.dx_stride[0] + h * m.dx_stride[1] + first * m.dx_stride[2] + d;
    int64_t at = -1;  // the arg-max; none for the rows past the last whole segment
    if (g < m.segments) {
      T best = 0;
      for (int64_t t = 0; t < m.len; ++t) {
        const T v = to_math<S, T>(in[t * m.stride[2]]);
        if (segment_max_takes(t, v, best)) {
          best = v;
          at = t;
        }
      }
    }
    // dy[g] in the math type: the sum of its slabs, each as stored in Acc (T is Acc: float for
    // bfloat16) or x's dtype.
    T grad = T(0);
    for (int64_t slab = 0; at >= 0 && slab < m.dy_slabs; ++slab) {
      const int64_t i = segment_max_dy_at(m, bh, slab, g, d);
      const T part =
          m.dy_acc ? static_cast<const T*>(m.dy)[i] : to_math<S, T>(static_cast<const S*>(m.dy)[i]);
      grad = slab == 0 ? part : grad + part;
    }
    if (m.accumulate) {
      if (at >= 0)
        out[at * m.dx_stride[2]] = to_storage<S, T>(to_math<S, T>(out[at * m.dx_stride[2]]) + grad);
      continue;
    }
    for (int64_t t = 0; t < count; ++t)
      out[t * m.dx_stride[2]] = to_storage<S, T>(t == at ? grad : T(0));
  }
}

}  // namespace
}  // namespace cpu_model

// A launch's parts run one after another here (on a GPU, at once: they write disjoint elements).
void running_max_forward_cpu(const RunningMaxes& r) {
  for (int i = 0; i < r.count; ++i)
    cpu_model::dispatch(r.part[i].dtype, [&](auto s, auto t) {
      cpu_model::running_max_forward_all<decltype(s), decltype(t)>(r.part[i]);
    });
}

void running_max_backward_cpu(const RunningMaxes& r) {
  for (int i = 0; i < r.count; ++i)
    cpu_model::dispatch(r.part[i].dtype, [&](auto s, auto t) {
      cpu_model::running_max_backward_all<decltype(s), decltype(t)>(r.part[i]);
    });
}

void segment_max_forward_cpu(const SegmentMaxes& m) {
  for (int i = 0; i < m.count; ++i)
    cpu_model::dispatch(m.part[i].dtype, [&](auto s, auto t) {
      cpu_model::segment_max_forward_all<decltype(s), decltype(t)>(m.part[i]);
    });
}

void segment_max_backward_cpu(const SegmentMaxes& m) {
  for (int i = 0; i < m.count; ++i)
    cpu_model::dispatch(m.part[i].dtype, [&](auto s, auto t) {
      cpu_model::segment_max_backward_all<decltype(s), decltype(t)>(m.part[i]);
    });
}

}  // namespace combiner::attention::fused
