#include "model/checkpointing.h"

#include "model/precision.h"

namespace combiner::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Function::apply passes its non-tensor arguments through IValues, which cannot hold a module:
// the block travels as its address and lives as long as the model that owns it.
struct CheckpointedBlock : public torch::autograd::Function<CheckpointedBlock> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t block) {
    ctx->saved_data["block"] = block;
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
    ctx->saved_data["autocast"] = autocast_enabled(x.device());
    ctx->save_for_backward({x});
    return as_block(block)->forward(x);  // autograd is off here: nothing else is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_output) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto generator = at::detail::getDefaultCPUGenerator();
    const auto rng_now = generator.get_state();
    generator.set_state(ctx->saved_data["rng"].toTensor());  // the forward's dropout masks
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      AutocastGuard autocast(ctx->saved_data["autocast"].toBool(), x.device());
      y = as_block(ctx->saved_data["block"].toInt())->forward(x);
    }
    generator.set_state(rng_now);
    torch::autograd::backward({y}, {grad_output[0]});  // parameter gradients accumulate here
    return {x.grad(), torch::Tensor()};
  }

  static BlockImpl* as_block(int64_t address) {
    return reinterpret_cast<BlockImpl*>(address);  // NOLINT(performance-no-int-to-ptr)
  }
};

}  // namespace

torch::Tensor checkpointed_forward(BlockImpl& block, const torch::Tensor& x) {
  return CheckpointedBlock::apply(x, reinterpret_cast<int64_t>(&block));
}

}  // namespace combiner::model
