#include "ops/cross_entropy.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <stdexcept>

#include "ops/cross_entropy_kernel.h"
#include "ops/dispatch.h"
#include "ops/shape.h"

namespace combiner::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

std::atomic<int64_t> loss_launched{0};

const Kernel<EntropyForward> kLossForward{&entropy_forward_cpu,
                                          COMBINER_OPS_CUDA(entropy_forward_cuda),
                                          &HostKernels::entropy_forward,
                                          kEntropyForwardLaunches,
                                          "fused loss"};
const Kernel<EntropyBackward> kLossBackward{&entropy_backward_cpu,
                                            COMBINER_OPS_CUDA(entropy_backward_cuda),
                                            &HostKernels::entropy_backward,
                                            kEntropyBackwardLaunches,
                                            "fused loss"};

Dtype logits_dtype(const torch::Tensor& t) {
  return t.scalar_type() == torch::kBFloat16 ? Dtype::kBFloat16 : Dtype::kFloat32;
}
TargetType target_type_of(const torch::Tensor& t) {
  return t.scalar_type() == torch::kByte ? TargetType::kUInt8 : TargetType::kInt64;
}

// The targets as the kernels read them: uint8 or int64, contiguous, one per row.
torch::Tensor flat_targets(const torch::Tensor& targets) {
  const auto type = targets.scalar_type();
  const auto t = type == torch::kByte || type == torch::kLong ? targets : targets.to(torch::kLong);
  return t.reshape({-1}).contiguous();
}

class CrossEntropyBits : public torch::autograd::Function<CrossEntropyBits> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& logits_in,
                               const torch::Tensor& targets_in,
                               bool mean) {
    const int64_t V = logits_in.size(-1);
    const auto logits = logits_in.reshape({-1, V}).contiguous();
    const auto targets = flat_targets(targets_in);
    const auto f32 = logits.options().dtype(torch::kFloat);
    auto bits = torch::empty({logits.size(0)}, f32), lse = torch::empty({logits.size(0)}, f32);
    EntropyForward f;
    f.rows = logits.size(0);
    f.vocab = V;
    f.logits = logits.data_ptr();
    f.dtype = logits_dtype(logits);
    f.targets = targets.data_ptr();
    f.target_type = target_type_of(targets);
    f.bits = bits.data_ptr<float>();
    f.lse = lse.data_ptr<float>();
    run_kernel(kLossForward, logits, f, loss_launched);
    ctx->save_for_backward({logits, targets, lse});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["shape"] = logits_in.sizes().vec();
    return mean ? bits.mean() : bits.view(targets_in.sizes());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const bool mean = ctx->saved_data["mean"].toBool();
    const auto grad = grads[0].to(torch::kFloat).reshape({-1}).contiguous();
    auto dlogits = torch::empty_like(logits);
    EntropyBackward b;
    b.rows = logits.size(0);
    b.vocab = logits.size(1);
    b.logits = logits.data_ptr();
    b.dtype = logits_dtype(logits);
    b.targets = targets.data_ptr();
    b.target_type = target_type_of(targets);
    b.lse = lse.data_ptr<float>();
    b.grad = grad.data_ptr<float>();
    b.grad_stride = mean ? 0 : 1;  // the mean's one gradient, shared by every row
    b.grad_scale = mean ? float(1.0 / double(std::max<int64_t>(b.rows, 1))) : 1.f;
    b.dlogits = dlogits.data_ptr();
    run_kernel(kLossBackward, logits, b, loss_launched);
    return {dlogits.view(ctx->saved_data["shape"].toIntVector()), {}, {}};
  }
};

}  // namespace

std::string cross_entropy_unsupported(const torch::Tensor& logits, const torch::Tensor& targets) {
  const auto type = logits.scalar_type();
  if (logits.dim() < 1 || logits.size(-1) < 1 ||
      (type != torch::kFloat && type != torch::kBFloat16))
    return "the logits must be float32 or bfloat16 [..., V], V >= 1, got " +
           std::string(c10::toString(type)) + " " + shape_of(logits);
  const auto rows = logits.sizes().slice(0, logits.dim() - 1);
  if (targets.sizes() != rows || !c10::isIntegralType(targets.scalar_type(), false) ||
      targets.device() != logits.device())
    return "the targets must be integers shaped as the logits less their last dimension " +
           shape_of(rows) + " on their device, got " +
           std::string(c10::toString(targets.scalar_type())) + " " + shape_of(targets);
#ifndef COMBINER_WITH_CUDA_OPS
  if (logits.is_cuda()) return "this build has no CUDA kernels";
#endif
  return "";
}

torch::Tensor cross_entropy_bits(const torch::Tensor& logits,
                                 const torch::Tensor& targets,
                                 bool mean) {
  const auto why = cross_entropy_unsupported(logits, targets);
  if (!why.empty()) throw std::invalid_argument("fused loss: " + why);
  return CrossEntropyBits::apply(logits, targets, mean);
}

torch::Tensor cross_entropy_bits_composed(const torch::Tensor& logits,
                                          const torch::Tensor& targets,
                                          bool mean) {
  const auto log2 = std::log(2.0);
  if (mean) {
    const auto flat = logits.to(torch::kFloat).reshape({-1, logits.size(-1)});
    return torch::nn::functional::cross_entropy(flat, targets.to(torch::kLong).reshape({-1})) /
           log2;
  }
  const auto log_probs = torch::log_softmax(logits.to(torch::kFloat), -1);
  const auto nats = -log_probs.gather(-1, targets.to(torch::kLong).unsqueeze(-1)).squeeze(-1);
  return nats / log2;
}

int64_t cross_entropy_launches() {
  return loss_launched.load();
}

}  // namespace combiner::ops
