// AdamW and gradient clipping for the training step. torch::optim::AdamW keeps the parameter
// groups and each parameter's state (exp_avg, exp_avg_sq, step): what checkpoints save. The
// update itself runs over a whole group at once: at::_fused_adamw_ (one multi-tensor kernel) on
// CUDA with LibTorch >= 2, else torch's foreach ops, which on the CPU run the very kernels of
// torch::optim::AdamW::step() in the same order, so CPU results are bitwise those of step().
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"

namespace combiner::train {

// AdamW with decoupled weight decay on matrices only; biases, LayerNorm gains and other
// parameters of rank 1 are not decayed (nanoGPT's rule: decay iff dim >= 2). amsgrad is off.
std::unique_ptr<torch::optim::AdamW> make_optimizer(model::ImageTransformer& model,
                                                    const config::TrainConfig& t);

void set_learning_rate(torch::optim::AdamW& optimizer, double lr);

// The key optimizer.state() files a parameter's state under: its TensorImpl's address, as text
// up to LibTorch 2.1, the pointer itself from 2.2 on.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;
OptimizerStateKey state_key(const torch::Tensor& parameter);

// The update adamw_step runs for parameters on `device`: "fused" (at::_fused_adamw_) or
// "foreach" (torch's foreach ops).
std::string adamw_kernel(const torch::Device& device);

// Advances each tensor's version counter, as LibTorch's in-place ops do. at::_fused_adamw_ writes
// its parameters without doing so; whatever keeps something made from a parameter
// (model::LinearImpl's bf16 copies) tells a changed parameter by its version.
void mark_changed(const std::vector<torch::Tensor>& tensors);

// One AdamW update of every parameter that has a gradient, with the state of `optimizer`
// (created as step() creates it): what optimizer.step() does, without its loop over parameters.
// Throws std::invalid_argument for amsgrad, which make_optimizer never sets.
void adamw_step(torch::optim::AdamW& optimizer);

// torch::nn::utils::clip_grad_norm_(parameters, max_norm) without reading the norm back: the
// same per-gradient 2-norms (one foreach call), their stacked 2-norm, and every gradient scaled
// by min(1, max_norm / (norm + 1e-6)) as a device tensor. Returns the total norm, a 0-dim float
// tensor on the gradients' device (0 on the CPU if no parameter has a gradient). max_norm may be
// infinity (no clipping; the gradients are multiplied by 1, as clip_grad_norm_ does).
torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace combiner::train
