#include "model/static_decoder.h"

#include "util/cuda_graph.h"

namespace combiner::model {

namespace {
torch::Device device_of(const ImageTransformer& model) {
  return model->parameters().front().device();
}
}  // namespace

StaticDecoder::StaticDecoder(ImageTransformer model,
                             int64_t batch,
                             bool capture,
                             bool bfloat16_cache)
    : model_(std::move(model)),
      batch_(batch),
      capture_(capture && device_of(model_).is_cuda() && util::CapturedWork::available()),
      inputs_(model_->options().attention, model_->options().length(), device_of(model_)) {
  TORCH_CHECK(batch > 0, "static decoder: batch must be > 0, got ", batch);
  for (const auto& block : *model_->blocks_) {
    const auto& attention = block->as<Block>()->attention();
    attention::StaticDecodeLayer::Options options;
    options.path = attention.path();
    options.bfloat16_cache = bfloat16_cache;
    layers_.emplace_back(attention.span_summary(), options);
  }
  const auto device = device_of(model_);
  {
    const torch::NoGradGuard no_grad;  // the weights as they are now: sampling changes none
    positions_ = model_->position_table();
  }
  token_ = torch::zeros({batch, 1}, torch::dtype(torch::kLong).device(device));
  logits_ =
      torch::zeros({batch, model_->options().vocab}, torch::dtype(torch::kFloat).device(device));
}

StaticDecoder::~StaticDecoder() = default;

void StaticDecoder::work() {
  auto h = model_->embed_at(token_, inputs_.position(), positions_).squeeze(1);
  logits_.copy_(model_->step_logits(
      h, [&](size_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return layers_[layer].step(q, k, v, inputs_);
      }));
}

torch::Tensor StaticDecoder::step(const torch::Tensor& token) {
  TORCH_CHECK(token.dim() == 1 && token.size(0) == batch_,
              "static decoder: expected tokens [",
              batch_,
              "], got ",
              token.sizes());
  TORCH_CHECK(position_ < inputs_.length(),
              "static decoder: all ",
              inputs_.length(),
              " positions already decoded");
  token_.copy_(token.view({batch_, 1}));
  const auto jobs = inputs_.prepare(position_);
  for (auto& layer : layers_) layer.summarize(jobs);
  // Step 0 runs op by op and allocates the caches; step 1 captures (its warm-up runs rewrite
  // the same cache entries with the same values) and every later step replays.
  if (capture_ && !graph_ && capture_error_.empty() && position_ == 1) {
    try {
      graph_ = std::make_unique<util::CapturedWork>([this] { work(); });
    } catch (const std::exception& e) {
      capture_error_ = e.what();
    }
  }
  if (graph_) {
    if (untimed_) {  // the last step's replay, done: its logits were read
      replay_ms_ += graph_->last_replay_ms();
      ++replays_;
    }
    graph_->replay();
    untimed_ = true;
  } else {
    work();
  }
  ++position_;
  return logits_.clone();
}

double StaticDecoder::mean_replay_ms() {
  if (graph_ && untimed_) {
    replay_ms_ += graph_->last_replay_ms();
    ++replays_;
    untimed_ = false;
  }
  return replays_ > 0 ? replay_ms_ / double(replays_) : -1;
}

}  // namespace combiner::model
