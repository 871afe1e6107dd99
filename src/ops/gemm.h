// Matrix products as a GPU's GEMM takes bf16 operands: float32 sums, the result rounded once to
// bf16. Where LibTorch's op does that (CUDA tensors) or the operands are not bf16, it is that op.
// On the CPU for bf16 operands, its model: the operands widened to float32 (exact), LibTorch's
// float32 op, the result rounded; the widening and rounding are hidden from LibTorch's op records,
// so that the launch count (tools/launch_count.h) sees the one op a GPU runs. LibTorch 1.13's own
// CPU bf16 matmul sums in bf16: at the 12,544 rows of a Fashion-MNIST batch, sums of positive
// terms come out at a fifth of their value.
#pragma once

#include <torch/torch.h>

namespace combiner::ops {

// a b, a [n, k] and b [k, m] of one dtype (either may be a transposed view).
torch::Tensor mm_float_sums(const torch::Tensor& a, const torch::Tensor& b);

// bias + a b, bias [m] of a's dtype.
torch::Tensor addmm_float_sums(const torch::Tensor& bias,
                               const torch::Tensor& a,
                               const torch::Tensor& b);

// a^T b, a [k, n] and b [k, m] bf16, as float32 sums written as they are, not rounded (a float32
// weight's gradient under autocast). On CUDA one GEMM with a float32 output (at::mm's out_dtype,
// LibTorch >= 2.8). Elsewhere its model: the operands widened 1,024 rows of k at a time, so that
// the copies stay small, and their float32 products summed; LibTorch records the one mm.
torch::Tensor mm_t_float_out(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace combiner::ops
