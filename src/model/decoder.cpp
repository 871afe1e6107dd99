#include "model/decoder.h"

namespace combiner::model {

Decoder::Decoder(ImageTransformer model) : model_(std::move(model)) {
  for (const auto& block : *model_->blocks_)
    states_.push_back(block->as<Block>()->start_decoding(model_->options().length()));
}

torch::Tensor Decoder::step(const torch::Tensor& token) {
  TORCH_CHECK(token.dim() == 1, "decoder: expected tokens [B], got ", token.sizes());
  TORCH_CHECK(position_ < model_->options().length(),
              "decoder: all ",
              model_->options().length(),
              " positions already decoded");
  auto h = model_->embed(token.to(torch::kLong).unsqueeze(1), position_).squeeze(1);
  torch::Tensor pending;  // each block's last residual add, done in the next LayerNorm's passes
  size_t layer = 0;
  for (const auto& block : *model_->blocks_) {
    auto& state = *states_[layer++];
    std::tie(h, pending) = block->as<Block>()->step_deferred(
        h, pending, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return state.step(q, k, v);
        });
  }
  ++position_;
  const auto normed =
      pending.defined() ? model_->ln_final_->add_forward(h, pending).second : model_->ln_final_(h);
  return model_->head_(normed).to(torch::kFloat);
}

}  // namespace combiner::model
