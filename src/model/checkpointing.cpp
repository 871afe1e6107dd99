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

// What is recomputed: the whole block, or its MLP half.
enum Part : int64_t { kWholeBlock = 0, kMlpHalf = 1 };

torch::Tensor run_part(BlockImpl& block, int64_t part, const torch::Tensor& x) {
  return part == kMlpHalf ? block.mlp_half(x) : block.forward(x);
}

// Function::apply passes its non-tensor arguments through IValues, which cannot hold a module:
// the block travels as its address and lives as long as the model that owns it.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& x,
                               int64_t block,
                               int64_t part) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["part"] = part;
    auto generator = dropout_generator(x.device());
    ctx->saved_data["rng"] = generator_state(generator);
    ctx->saved_data["autocast"] = autocast_enabled(x.device());
    ctx->save_for_backward({x});
    return run_part(*as_block(block), part, x);  // autograd is off here: nothing else is kept
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
      y = run_part(block, ctx->saved_data["part"].toInt(), x);
    }
    set_generator_state(generator, rng_now);
    torch::autograd::backward({y}, {grad_output[0]});  // parameter gradients accumulate here
    return {x.grad(), torch::Tensor(), torch::Tensor()};
  }

  static BlockImpl* as_block(int64_t address) {
    return reinterpret_cast<BlockImpl*>(address);  // NOLINT(performance-no-int-to-ptr)
  }
};

}  // namespace

torch::Tensor checkpointed_forward(BlockImpl& block, const torch::Tensor& x) {
  return CheckpointedBlock::apply(x, reinterpret_cast<int64_t>(&block), int64_t{kWholeBlock});
}

torch::Tensor checkpointed_mlp(BlockImpl& block, const torch::Tensor& h) {
  return CheckpointedBlock::apply(h, reinterpret_cast<int64_t>(&block), int64_t{kMlpHalf});
}

}  // namespace combiner::model
