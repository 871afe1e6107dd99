// A residual add, the LayerNorm after it and the linear layer reading it, as one op over the kernel
// of ops/norm_linear_kernel.h (on CUDA tensors the CUDA kernel in CUDA builds, elsewhere its CPU
// model): a decode step's `norm(x + branch)` and the projection that follows it, in one launch
// where they are three. Inference only: no autograd (the decoders call it through
// model::LayerNormImpl::add_forward_linear, under NoGradGuard).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>

namespace combiner::ops {

// Why the kernel cannot take this (empty when it can): x float32 [rows, W], W a multiple of 32 up
// to 1024; residual undefined or as x; norm_weight, norm_bias float32 [W]; weight float32
// [out, W]; bias undefined or float32 [out]; all on x's device and none requiring a gradient
// (or grad mode off); on a GPU, a build with the kernel.
std::string norm_linear_unsupported(const torch::Tensor& x,
                                    const torch::Tensor& residual,
                                    const torch::Tensor& norm_weight,
                                    const torch::Tensor& norm_bias,
                                    const torch::Tensor& weight,
                                    const torch::Tensor& bias);

// (s, y): s = x + residual (x itself without a residual), y = act(LayerNorm(s) W^T + b), act the
// identity or, with `gelu`, GELU (erf). Throws std::invalid_argument where
// norm_linear_unsupported says why.
std::pair<torch::Tensor, torch::Tensor> norm_linear(const torch::Tensor& x,
                                                    const torch::Tensor& residual,
                                                    const torch::Tensor& norm_weight,
                                                    const torch::Tensor& norm_bias,
                                                    double eps,
                                                    const torch::Tensor& weight,
                                                    const torch::Tensor& bias,
                                                    bool gelu);

// Kernels launched (CUDA) or modelled (CPU) by norm_linear so far, as a GPU counts them.
int64_t norm_linear_launches();

}  // namespace combiner::ops
