// The training loss, bits per subpixel, as one autograd op over the kernels of
// ops/cross_entropy_kernel.h (on CUDA tensors the CUDA kernels in CUDA builds, elsewhere their
// CPU model), beside the same loss in LibTorch's ops, its reference. The fused op keeps for
// backward the logits themselves and one float per row (the log-sum-exp), where LibTorch's
// cross-entropy keeps the normalised log-probabilities in float32 and its backward writes a
// zero-filled gradient of their size before the softmax's: one kernel each way instead of
// log_softmax, nll_loss and their backward's three.
#pragma once

#include <torch/torch.h>

#include <string>

namespace combiner::ops {

// Why the kernels cannot take these (empty when they can): logits float32 or bfloat16
// [..., V], V >= 1; targets an integer tensor of logits' shape less its last dimension, on the
// same device; on a GPU, a build with the kernels.
std::string cross_entropy_unsupported(const torch::Tensor& logits, const torch::Tensor& targets);

// -log2 softmax(logits)[target] over the last dimension: float32 of targets' shape, or with
// `mean` their mean (a 0-dim float32). Differentiable in logits, whose gradient comes in their
// dtype. A target outside [0, V) gives NaN bits and gradient in its row. Throws
// std::invalid_argument where cross_entropy_unsupported says why.
torch::Tensor cross_entropy_bits(const torch::Tensor& logits,
                                 const torch::Tensor& targets,
                                 bool mean);

// The same in LibTorch's ops (log_softmax and gather; with `mean`, cross_entropy), in float32:
// the reference the fused op is held to, and the loss wherever the kernels do not run.
torch::Tensor cross_entropy_bits_composed(const torch::Tensor& logits,
                                          const torch::Tensor& targets,
                                          bool mean);

// Kernels launched (CUDA) or modelled (CPU) by cross_entropy_bits so far, as a GPU counts them.
int64_t cross_entropy_launches();

}  // namespace combiner::ops
