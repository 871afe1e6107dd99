// The pools' scans as the kernels take them (fused/kernel_scan.h): a tensor's lines for the
// running max, its segments for the segment max. Shared by the pools' autograd ops (pools.cpp)
// and a fused call's own pools (pool_stage.cpp).
#pragma once

#include <torch/torch.h>

#include "attention/fused/kernel.h"

#include <cstdint>

namespace combiner::attention::pools_detail {

// The scan kernels' dtype for a tensor of dtype t.
fused::Dtype scan_dtype(torch::ScalarType t);

// The layout of y, dy or dx, tensors of x's logical shape in the caller's axis order whose last
// axis is contiguous, as the kernel walks them: moved as x was (`scan` is where `dim` went).
fused::ScanLayout layout_of(const torch::Tensor& t, int64_t dim, int64_t scan);

// The axis x is scanned along, as the kernel reads x: x itself where describe() takes it; else,
// where only the axes between `dim` and the last break the inner block (the axial variants' rows
// of a q or k that is a view of the fused qkv projection, whose column stride is 3 x width), `dim`
// moved next to the last axis, so those axes become outer ones and x is read in place; else a
// contiguous copy. Returns the scan axis; x is replaced by what the kernel reads.
int64_t scan_layout(torch::Tensor& x, int64_t dim, fused::RunningMax& r);

// What the scan covers of x: x itself, or (segments > 0) the first segments x len rows of a
// [B, H, rows, D] x as [B, H, segments, len, D] (a view).
torch::Tensor segments_of(const torch::Tensor& x, int64_t segments, int64_t len);

// x [B, H, rows, D] with D contiguous, as SegmentMax reads it.
fused::SegmentMax segment_max_of(const torch::Tensor& x, int64_t segments, int64_t len);

// dx [B, H, rows, D] with D contiguous: a contiguous gradient, or a part of a packed one.
void set_dx(fused::SegmentMax& m, const torch::Tensor& dx);

}  // namespace combiner::attention::pools_detail
