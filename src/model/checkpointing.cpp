#include "model/checkpointing.h"

#include "model/precision.h"

namespace combiner::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generator the block's dropout draws from on x's device (the CPU's, or the CUDA device's):
// its state before the forward is what the recomputation must start from.
at::Generator dropout_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

torch::Tensor generator_state(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(at::Generator& generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Function::apply passes its non-tensor arguments through IValues, which cannot hold a module:
// the block travels as its address and lives as long as the model that owns it.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t block) {
    ctx->saved_data["block"] = block;
    auto generator = dropout_generator(x.device());
    ctx->saved_data["rng"] = generator_state(generator);
    ctx->saved_data["autocast"] = autocast_enabled(x.device());
    ctx->save_for_backward({x});
    return as_block(block)->forward(x);  // autograd is off here: nothing else is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_output) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto generator = dropout_generator(x.device());
    const auto rng_now = generator_state(generator);
    set_generator_state(generator, ctx->saved_data["rng"].toTensor());  // the forward's masks
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(ctx->saved_data["autocast"].toBool(), x.device());
      auto& block = *as_block(ctx->saved_data["block"].toInt());
      y = block.forward(x);
    }
    set_generator_state(generator, rng_now);
    torch::autograd::backward({y}, {grad_output[0]});  // parameter gradients accumulate here
    return {x.grad(), torch::Tensor()};
  }

  static BlockImpl* as_block(int64_t address) {
    return reinterpret_cast<BlockImpl*>(address);  // NOLINT(performance-no-int-to-ptr)
  }
};

// The MLP half kept as its input and its dropout draw; the branch is recomputed in backward and
// the kept draw applied as the plain block's dropout applies it (on CUDA by native_dropout's own
// backward kernel).
struct RecomputedMlp : public torch::autograd::Function<RecomputedMlp> {
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x,
                               const torch::Tensor& branch,
                               int64_t block) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["autocast"] = autocast_enabled(x.device());
    ctx->saved_data["branch_dtype"] = int64_t(branch.scalar_type());
    auto& b = *CheckpointedBlock::as_block(block);
    auto [h, normed] = b.add_and_norm(x, branch);  // autograd is off here
    auto [out, mask] = b.mlp_dropout(b.mlp_of_normed(normed));
    ctx->save_for_backward({h, mask});
    return h + out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_output) {
    const auto saved = ctx->get_saved_variables();
    auto h = saved[0].detach().requires_grad_(true);
    const auto& mask = saved[1];
    auto& block = *CheckpointedBlock::as_block(ctx->saved_data["block"].toInt());
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(ctx->saved_data["autocast"].toBool(), h.device());
      y = h + block.replay_mlp_dropout(block.mlp_branch(h), mask);
    }
    torch::autograd::backward({y}, {grad_output[0]});  // parameter gradients accumulate here
    // h = x + branch: both take h's gradient, the branch in its own dtype.
    const auto branch_dtype =
        static_cast<torch::ScalarType>(ctx->saved_data["branch_dtype"].toInt());
    return {h.grad(), h.grad().to(branch_dtype), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpointed_forward(BlockImpl& block, const torch::Tensor& x) {
  return CheckpointedBlock::apply(x, reinterpret_cast<int64_t>(&block));
}

torch::Tensor checkpointed_mlp(BlockImpl& block,
                               const torch::Tensor& x,
                               const torch::Tensor& branch) {
  return RecomputedMlp::apply(x, branch, reinterpret_cast<int64_t>(&block));
}

}  // namespace combiner::model
