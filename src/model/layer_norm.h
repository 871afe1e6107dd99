// The model's LayerNorm: torch::nn::LayerNorm's parameters (weight and bias, the same names in a
// checkpoint) and function, run by the fused kernels of ops/layer_norm.h where they apply. Under
// bf16 autocast the fused output is bf16, the dtype the matmul reading it casts to (LibTorch's
// layer_norm returns float32 there, and the matmul's cast is one more kernel each way).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace combiner::model {

class LayerNormImpl : public torch::nn::Module {
 public:
  // kAuto: the fused kernels on CUDA where they apply, LibTorch's layer_norm elsewhere;
  // kComposed: LibTorch's; kFused: the fused op wherever it applies (on the CPU the kernels'
  // model). As attention::AttentionImpl::Path.
  enum class Path { kAuto, kComposed, kFused };

  explicit LayerNormImpl(int64_t width, double eps = 1e-5);
  torch::Tensor forward(const torch::Tensor& x);
  // (h, forward(h)) for h = x + residual, the residual add of a pre-LayerNorm block: on the fused
  // path in the norm's own passes (ops::fused_add_layer_norm), else an add and forward(h).
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x,
                                                      const torch::Tensor& residual);
  // (h, act(forward(h) W^T + b)) for h = x + residual (x itself when residual is undefined), act
  // the identity or GELU: a decode step's LayerNorm and the linear layer reading it (weight
  // [out, W], bias [out] or undefined). On the fused path, outside autocast, in one kernel where
  // it applies (ops::norm_linear: float32, no gradient), else add_forward then at::linear.
  std::pair<torch::Tensor, torch::Tensor> add_forward_linear(const torch::Tensor& x,
                                                             const torch::Tensor& residual,
                                                             const torch::Tensor& weight,
                                                             const torch::Tensor& bias,
                                                             bool gelu);
  void set_path(Path path) { path_ = path; }
  Path path() const { return path_; }

  torch::Tensor weight, bias;

 private:
  bool fused_for(const torch::Tensor& x) const;  // the path asks for the fused op

  double eps_;
  Path path_ = Path::kAuto;
};
TORCH_MODULE(LayerNorm);

}  // namespace combiner::model
