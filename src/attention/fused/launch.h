// The fused family's one way to run a kernel: on the device of the tensor it reads, the CUDA
// kernel (CUDA builds) or its CPU model, on the current stream, counted as the launches a GPU
// makes for it (fused_kernel_launches, combiner-bench --count).
#pragma once

#include <torch/torch.h>

#include "attention/fused/kernel.h"

namespace combiner::attention::fused_launch {

void forward(const torch::Tensor& on, const fused::Forward& f);
void delta(const torch::Tensor& on, const fused::Delta& d);
void backward(const torch::Tensor& on, const fused::Backward& b);
void running_max(const torch::Tensor& on, const fused::RunningMax& r);
void running_max_backward(const torch::Tensor& on, const fused::RunningMax& r);
void segment_max(const torch::Tensor& on, const fused::SegmentMax& m);
void segment_max_backward(const torch::Tensor& on, const fused::SegmentMax& m);

}  // namespace combiner::attention::fused_launch
