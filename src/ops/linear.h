// A linear layer (and the GELU after it) as one autograd op whose backward makes the bias's
// gradient with the kernels of ops/bias_grad_kernel.h (on CUDA tensors the CUDA kernels in CUDA
// builds, elsewhere their CPU model): GELU's backward and the bias's column sums in one pass, the
// sums in float32 written in the bias's dtype. The forward and the input's gradient are
// at::linear's ops (addmm, gelu, mm) as a GPU runs them, float32 sums on the CPU too (ops/gemm.h);
// the weight's is an mm too, but under autocast (a float32 weight, bf16 operands) it writes the
// mm's float32 sums where at::linear's rounds them to bf16 and casts them back.
// model/linear.h decides where it runs instead of at::linear.
#pragma once

#include <torch/torch.h>

#include <string>

namespace combiner::ops {

// Why the kernels cannot take this layer (empty when they can): x float32 or bfloat16 [..., in];
// weight float32 or bfloat16 [out, in]; bias float32 or bfloat16 [out], out a multiple of 8; all
// on x's device; on a GPU, a build with the kernels.
std::string fused_linear_unsupported(const torch::Tensor& x,
                                     const torch::Tensor& weight,
                                     const torch::Tensor& bias);

// y = x weight^T + bias, GELU(y) (erf) with `gelu`, in `dtype` (float32, or bfloat16 as autocast
// runs a linear: x, weight and bias cast to it, rounded once): at::linear's (and at::gelu's)
// numbers. Differentiable in x, weight and bias, each gradient in its tensor's dtype, the bias's
// summed in float32 in the kernels' fixed order, a float32 weight's from float32 sums. What
// backward keeps is what autocast's addmm and gelu keep: x and the weight in `dtype`, and with GELU
// its input. Throws std::invalid_argument where fused_linear_unsupported says why. `weight_copy`
// and `bias_copy`, where given, are weight and bias already in `dtype` (the caller's promise:
// ops/weight_cast.h writes them), read instead of casting them; the gradients still go to weight
// and bias.
torch::Tensor fused_linear(const torch::Tensor& x,
                           const torch::Tensor& weight,
                           const torch::Tensor& bias,
                           bool gelu,
                           torch::ScalarType dtype,
                           const torch::Tensor& weight_copy = {},
                           const torch::Tensor& bias_copy = {});

// Kernels launched (CUDA) or modelled (CPU) by fused_linear's backward so far, as a GPU counts
// them.
int64_t bias_grad_launches();

}  // namespace combiner::ops
