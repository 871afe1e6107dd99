// The max pools as scans of lines: the running max of the axial variants' spans and the plain
// max over a segment, their lines, and several scans in one launch (kernel_scan.cu, the CUDA
// kernels; kernel_scan_cpu.cpp, the CPU model).
#pragma once

#include "attention/fused/kernel_pass.h"

namespace combiner::attention::fused {

// The inclusive running max along one axis (the cumulative max pools of the axial variants'
// spans: down each column for vertical, along each row both ways for horizontal), in one launch
// where LibTorch's cummax, flips, scatter-add and copies take dozens. The tensors are viewed as
// lines [outer0, outer1, outer2, inner] of n steps, each through its own ScanLayout: x as it is
// (a view of the qkv projection, say), y and dy, and dx, so that y and dx can be written in the
// caller's layout and need no copy. `reverse` runs t from n - 1 down. Ties and NaN as
// torch::cummax: a value >= the running max, or NaN, becomes it. Backward: dx[t] = the sum of dy
// over the steps whose max is x[t] (Acc sums), found again by the same scan: no indices are kept.
// With `accumulate`, the backward adds that sum into dx (each element is read and written by the
// one thread that owns its line) and leaves the other elements as they are: the fused call adds a
// pool's gradient into k's or q's in place.
struct ScanLayout {  // line (a, b, c, i)'s step t at a*s[0] + b*s[1] + c*s[2] + t*step + i
  int64_t outer_stride[3] = {0, 0, 0};
  int64_t step_stride = 0;
};
struct RunningMax {
  int64_t outer[3] = {1, 1, 1};
  int64_t n = 0, inner = 1;
  ScanLayout x_at, y_at, dx_at;  // x; y and dy; dx (each line's inner elements contiguous)
  bool reverse = false;
  Dtype dtype = Dtype::kFloat32;
  const void* x = nullptr;
  void* y = nullptr;         // forward
  const void* dy = nullptr;  // backward
  void* dx = nullptr;        // backward
  bool accumulate = false;   // backward: dx += (else every element of the lines is stored)
};

COMBINER_HD int64_t running_max_lines(const RunningMax& r) {
  return r.outer[0] * r.outer[1] * r.outer[2] * r.inner;
}
// Where line `line` starts in a tensor of layout `at`; its step t is at + t * at.step_stride.
COMBINER_HD int64_t running_max_start(const RunningMax& r, const ScanLayout& at, int64_t line) {
  const int64_t i = line % r.inner;
  int64_t o = line / r.inner;
  const int64_t c = o % r.outer[2];
  o /= r.outer[2];
  const int64_t b = o % r.outer[1], a = o / r.outer[1];
  return a * at.outer_stride[0] + b * at.outer_stride[1] + c * at.outer_stride[2] + i;
}
COMBINER_HD int64_t running_max_step(const RunningMax& r, int64_t k) {
  return r.reverse ? r.n - 1 - k : k;
}
// Whether x[t] = v becomes the running max `best` at the scan's k-th step.
template <typename T>
COMBINER_HD bool running_max_takes(int64_t k, T v, T best) {
  return k == 0 || v != v || v >= best;  // v != v: NaN
}

// Lines of the forward (b, h, g < segments, d) and of the backward (g < ceil(rows / len)).
COMBINER_HD int64_t segment_max_lines(const SegmentMax& m, bool backward) {
  const int64_t groups = backward ? (m.rows + m.len - 1) / m.len : m.segments;
  return m.batch * m.heads * groups * m.dim;
}
// The element of dy's slab `slab` for line (b * heads + h, g, d): dy[g] is the sum over the
// slabs, slab 0 first, in every implementation (the same float rounding).
COMBINER_HD int64_t
segment_max_dy_at(const SegmentMax& m, int64_t bh, int64_t slab, int64_t g, int64_t d) {
  return ((bh * m.dy_slabs + slab) * m.segments + g) * m.dim + d;
}
template <typename T>
COMBINER_HD bool segment_max_takes(int64_t t, T v, T best) {
  return t == 0 || (v != v && best == best) || v > best;  // v != v: NaN
}

// Several scans of one kind and dtype in one launch (the pools of a fused call: ks's and qs's,
// prefixes and suffixes): part i's lines follow part i - 1's. The parts of a backward write
// disjoint elements of dx (a thread owns its line's; two parts adding into one element would
// race).
constexpr int kMaxScanParts = 4;
template <typename Scan>
struct ScanParts {
  Scan part[kMaxScanParts];
  int count = 0;
};
using RunningMaxes = ScanParts<RunningMax>;
using SegmentMaxes = ScanParts<SegmentMax>;
// One scan as a launch's parts (a pass's key pool as the segment max kernel would run it).
template <typename Scan>
COMBINER_HD ScanParts<Scan> one_part(const Scan& scan) {
  ScanParts<Scan> parts;
  parts.part[0] = scan;
  parts.count = 1;
  return parts;
}

COMBINER_HD int64_t scan_lines(const RunningMax& r, bool) {
  return running_max_lines(r);
}
COMBINER_HD int64_t scan_lines(const SegmentMax& m, bool backward) {
  return segment_max_lines(m, backward);
}
template <typename Scan>
COMBINER_HD int64_t scan_lines(const ScanParts<Scan>& s, bool backward) {
  int64_t lines = 0;
  for (int i = 0; i < s.count; ++i) lines += scan_lines(s.part[i], backward);
  return lines;
}
// The part that line `line` of the launch belongs to; `line` becomes its line in that part.
template <typename Scan>
COMBINER_HD int scan_part(const ScanParts<Scan>& s, bool backward, int64_t& line) {
  int i = 0;
  while (i + 1 < s.count && line >= scan_lines(s.part[i], backward))
    line -= scan_lines(s.part[i++], backward);
  return i;
}

}  // namespace combiner::attention::fused
