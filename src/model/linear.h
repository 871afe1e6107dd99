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
  // Whether forward on `device` with a gradient takes the fused op (given supported shapes).
  bool fused_on(const torch::Device& device) const;
  // bf16 copies of weight and bias for the fused path under autocast to read instead of casting
  // them (the model writes them once per forward, in one launch: ops/weight_cast.h). Read only
  // while weight and bias are the memory and version they were when given; else the layer casts.
  void use_copies(const torch::Tensor& weight_copy, const torch::Tensor& bias_copy);

  torch::Tensor weight, bias;

 private:
  torch::Tensor run(const torch::Tensor& x, bool gelu);

  struct Copies {
    torch::Tensor weight, bias;
    const void *weight_of = nullptr, *bias_of = nullptr;
    int64_t weight_version = -1, bias_version = -1;
  };
  bool copies_current() const;

  Path path_ = Path::kAuto;
  Copies copies_;
};
TORCH_MODULE(Linear);

}  // namespace combiner::model
