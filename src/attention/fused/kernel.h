// The fused Combiner attention core, without torch: for every query of a segment (a block, a row
// or a column), one softmax over the segment's own keys (masked) and, optionally, one summary per
// earlier segment, then the weighted sum of their values; the forward saves one log-sum-exp per
// query and the backward recomputes the weights from it, as FlashAttention does. No score tensor
// leaves the tile. Two implementations read the same descriptors (kernel_pass.h): a CPU model
// (plain loops over the same tiles with the same formulas; tests and kernel-check) and the CUDA
// kernels (CUDA builds). The rules they read them by (kernel_index.h: rows, masks and tiles;
// kernel_scan.h: the max pools' lines; kernel_plan.h: which launches a call makes) are shared,
// word for word, by both (host and device functions). Below, the entry points of each.
#pragma once

#include "attention/fused/kernel_index.h"
#include "attention/fused/kernel_pass.h"
#include "attention/fused/kernel_plan.h"
#include "attention/fused/kernel_scan.h"

namespace combiner::attention::fused {

// ---- the CPU model (fused/kernel_cpu.cpp): float32, float64, bfloat16 (float32 arithmetic) ----
void forward_cpu(const Forward& f);
void forward_pair_cpu(const ForwardPair& f);  // pairable(first, second)
void delta_cpu(const Delta& d);
void backward_cpu(const Backward& b);
void backward_pair_cpu(const BackwardPair& b);  // pairable(first, second)
void running_max_forward_cpu(const RunningMaxes& r);
void running_max_backward_cpu(const RunningMaxes& r);
void segment_max_forward_cpu(const SegmentMaxes& m);
void segment_max_backward_cpu(const SegmentMaxes& m);

// ---- the CUDA kernels (kernel_*.cu; CUDA builds only): float32 and bfloat16, D = Dv in
// {32, 64, 128}, every row 16-byte aligned. `stream` is a cudaStream_t. Errors throw
// std::runtime_error naming the launch.
bool cuda_supports(Dtype dtype, int64_t dim);
void forward_cuda(const Forward& f, void* stream);
void forward_pair_cuda(const ForwardPair& f, void* stream);
void delta_cuda(const Delta& d, void* stream);
void backward_cuda(const Backward& b, void* stream);
void backward_pair_cuda(const BackwardPair& b, void* stream);
// The scans in float32 or bfloat16, any inner length (one thread per line), all parts in one
// launch.
void running_max_forward_cuda(const RunningMaxes& r, void* stream);
void running_max_backward_cuda(const RunningMaxes& r, void* stream);
void segment_max_forward_cuda(const SegmentMaxes& m, void* stream);
void segment_max_backward_cuda(const SegmentMaxes& m, void* stream);

}  // namespace combiner::attention::fused
