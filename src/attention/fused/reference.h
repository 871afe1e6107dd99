// The fused family's kernel-level references: each variant's joint softmax given its summaries,
// composed of LibTorch ops (autograd), that fused_attention() with the variant's joint passes
// must reproduce (tests/attention/fused_test.cpp, combiner-bench kernel-check).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace combiner::attention {

// The joint softmax of each variant given its summaries, composed of LibTorch ops (autograd):
// the kernel-level reference for fused_attention() with fixed_joint_passes() /
// rowmajor_joint_passes() / vertical_joint_passes() / horizontal_joint_passes(). Shapes as in
// fused/fused.h; ks and u undefined when L fits one block/row.
torch::Tensor joint_fixed_reference(const torch::Tensor& q,
                                    const torch::Tensor& k,
                                    const torch::Tensor& v,
                                    const torch::Tensor& ks,
                                    const torch::Tensor& u,
                                    int64_t block);
torch::Tensor joint_rowmajor_reference(const torch::Tensor& q,
                                       const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& ks,
                                       const torch::Tensor& u,
                                       int64_t row_len);

torch::Tensor joint_vertical_reference(const torch::Tensor& q,
                                       const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& ks,
                                       const torch::Tensor& u,
                                       int64_t row_len);
torch::Tensor joint_horizontal_reference(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         const torch::Tensor& ks,
                                         const torch::Tensor& u,
                                         int64_t row_len);

}  // namespace combiner::attention
