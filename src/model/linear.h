// The model's linear layer: torch::nn::Linear's parameters (weight [out, in], bias [out]; the same
// names in a checkpoint) and function, as at::linear computes it (the bias added by the matmul:
// addmm, cuBLASLt's bias epilogue on a GPU). On the fused path its backward makes the bias's
// gradient with the kernels of ops/linear.h, and with forward_gelu GELU's backward in the same
// pass: two launches where LibTorch's are a column sum and the float32 bias's cast (and the GELU
// backward before them); under autocast the weight's gradient is one GEMM's float32 sums, where
// LibTorch's rounds them to bf16 and casts them back.
#pragma once

#include <torch/torch.h>

#include "model/layer_norm.h"

namespace combiner::model {

class LinearImpl : public torch::nn::Module {
 public:
  // As LayerNormImpl's: kAuto the fused op on CUDA where it applies, kComposed LibTorch's,
  // kFused the fused op wherever it applies (on the CPU the kernels' model).
  using Path = LayerNormImpl::Path;

  LinearImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor forward_gelu(const torch::Tensor& x);  // GELU(forward(x)), erf GELU
  void set_path(Path path) { path_ = path; }
  Path path() const { return path_; }

  torch::Tensor weight, bias;

 private:
  torch::Tensor run(const torch::Tensor& x, bool gelu);

  Path path_ = Path::kAuto;
};
TORCH_MODULE(Linear);

}  // namespace combiner::model
