// LayerNorm as one autograd op over the kernels of ops/layer_norm_kernel.h: on CUDA tensors the
// CUDA kernels (CUDA builds), elsewhere their CPU model (slow: for tests and for counting on the
// CPU what a GPU launches). model/layer_norm.h decides where it runs instead of LibTorch's.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>

namespace combiner::ops {

// Why the kernels cannot take this LayerNorm (empty when they can): x float32 with its last
// dimension W a multiple of 32 up to 1024, weight and bias float32 [W] on x's device, and on a
// GPU a build with the kernels.
std::string fused_norm_unsupported(const torch::Tensor& x,
                                   const torch::Tensor& weight,
                                   const torch::Tensor& bias);

// LayerNorm of x over its last dimension, y = (x - mean) / sqrt(var + eps) * weight + bias,
// returned in `out_dtype` (float32, or bfloat16 for a matmul's input under autocast: rounded
// once, no cast kernel after it). Differentiable in x, weight and bias; the gradient of y may
// come in either dtype. Throws std::invalid_argument where fused_norm_unsupported says why.
torch::Tensor fused_layer_norm(const torch::Tensor& x,
                               const torch::Tensor& weight,
                               const torch::Tensor& bias,
                               double eps,
                               torch::ScalarType out_dtype);

// A residual add and the LayerNorm after it, as a transformer block's `h = x + branch` then
// `norm(h)`: returns (h, LayerNorm(h) in `out_dtype`), h = x + residual in float32 (residual
// float32 or bfloat16, x's shape). One pass each way: the add is done where the row is read, and
// the backward adds h's gradient from its other readers to the norm's and writes the residual's
// gradient in its dtype there too. Differentiable in x, residual, weight and bias.
std::string fused_add_norm_unsupported(const torch::Tensor& x,
                                       const torch::Tensor& residual,
                                       const torch::Tensor& weight,
                                       const torch::Tensor& bias);
std::pair<torch::Tensor, torch::Tensor> fused_add_layer_norm(const torch::Tensor& x,
                                                             const torch::Tensor& residual,
                                                             const torch::Tensor& weight,
                                                             const torch::Tensor& bias,
                                                             double eps,
                                                             torch::ScalarType out_dtype);

// Kernels launched (CUDA) or modelled (CPU) by the ops above so far, as a GPU counts them.
int64_t norm_kernel_launches();

}  // namespace combiner::ops
