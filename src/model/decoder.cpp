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
  const auto logits = model_->step_logits(
      h, [&](size_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return states_[layer]->step(q, k, v);
      });
  ++position_;
  return logits.to(torch::kFloat);
}

}  // namespace combiner::model
