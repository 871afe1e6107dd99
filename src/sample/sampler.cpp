#include "sample/sampler.h"

#include <algorithm>
#include <stdexcept>

#include "model/decoder.h"
#include "model/static_decoder.h"

namespace combiner::sample {

namespace {

// Draws on the CPU, whatever the model's device: one generator, the same images everywhere.
torch::Tensor draw(const torch::Tensor& device_logits,
                   double temperature,
                   at::Generator& generator) {
  auto logits = device_logits.to(torch::kCPU);
  if (temperature == 0.0) return logits.argmax(-1);
  auto probs = torch::softmax(logits.to(torch::kDouble) / temperature, -1);
  return torch::multinomial(probs, 1, /*replacement=*/false, generator).squeeze(-1);
}

torch::Device device_of(model::ImageTransformer& model) {
  return model->parameters().front().device();
}

// x: [n, L] on the CPU, filled in place, position by position.
// Called after position i of x is drawn.
using StepDone = std::function<void(int64_t i)>;

template <typename Decoder>
void sample_cached(Decoder& decoder,
                   model::ImageTransformer& model,
                   torch::Tensor& x,
                   double temperature,
                   at::Generator& generator,
                   const StepDone& step_done) {
  auto token = torch::full({x.size(0)}, model->options().vocab, torch::kLong);  // start token
  for (int64_t i = 0; i < x.size(1); ++i) {
    token = draw(decoder.step(token.to(device_of(model))), temperature, generator);
    x.select(1, i).copy_(token);
    step_done(i);
  }
}

// The cached decoder options.decoder asks for, on x's images; tells on_decoder which ran.
void sample_with_cache(model::ImageTransformer& model,
                       torch::Tensor& x,
                       const SampleOptions& options,
                       at::Generator& generator,
                       const StepDone& step_done) {
  using Choice = SampleOptions::Decoder;
  const bool fixed_shapes =
      options.decoder == Choice::kStatic ||
      (options.decoder == Choice::kAuto && (device_of(model).is_cuda() || options.bfloat16_cache));
  if (!fixed_shapes) {
    if (options.on_decoder) options.on_decoder("dynamic");
    model::Decoder decoder(model);
    sample_cached(decoder, model, x, options.temperature, generator, step_done);
    return;
  }
  model::StaticDecoder decoder(model, x.size(0), /*capture=*/true, options.bfloat16_cache);
  sample_cached(decoder, model, x, options.temperature, generator, [&](int64_t i) {
    if (i == std::min<int64_t>(1, x.size(1) - 1) && options.on_decoder)  // captured at step 1
      options.on_decoder(
          std::string("static") + (options.bfloat16_cache ? ", bfloat16 caches" : "") +
          (decoder.captured()                ? ", captured as a CUDA graph"
           : decoder.capture_error().empty() ? ""
                                             : ", op by op (" + decoder.capture_error() + ")"));
    step_done(i);
  });
  const double ms = decoder.mean_replay_ms();
  if (ms >= 0 && options.on_replay_time) options.on_replay_time(ms);
}

void sample_plain(model::ImageTransformer& model,
                  torch::Tensor& x,
                  double temperature,
                  at::Generator& generator,
                  const StepDone& step_done) {
  const auto& shape = model->options().image;
  const int64_t L = x.size(1), row = shape.width * shape.channels;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t prefix = std::min(L, (i / row + 1) * row);
    auto logits = model->forward(x.narrow(1, 0, prefix).to(device_of(model))).select(1, i);
    x.select(1, i).copy_(draw(logits, temperature, generator));
    step_done(i);
  }
}

}  // namespace

torch::Tensor sample_images(model::ImageTransformer& model, const SampleOptions& options) {
  if (options.count <= 0)
    throw std::invalid_argument("sample: --num must be > 0, got " + std::to_string(options.count));
  if (options.batch < 0)
    throw std::invalid_argument("sample: --batch must be >= 0 (0 = all at once), got " +
                                std::to_string(options.batch));
  if (!(options.temperature >= 0.0))
    throw std::invalid_argument("sample: --temperature must be >= 0, got " +
                                std::to_string(options.temperature));
  if (options.bfloat16_cache && !options.cache)
    throw std::invalid_argument("sample: --cache-dtype bfloat16 needs the cache (not --no-cache)");
  if (options.bfloat16_cache && options.decoder == SampleOptions::Decoder::kDynamic)
    throw std::invalid_argument(
        "sample: --cache-dtype bfloat16 is the static decoder's (--decoder static or auto), not "
        "--decoder dynamic");
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const auto& shape = model->options().image;
  const int64_t batch = options.batch > 0 ? options.batch : options.count;
  auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(options.seed));

  const int64_t L = shape.length(), batches = (options.count + batch - 1) / batch;
  std::vector<torch::Tensor> chunks;
  for (int64_t first = 0; first < options.count; first += batch) {
    auto x = torch::zeros({std::min(batch, options.count - first), L}, torch::kLong);
    const int64_t before = first / batch * L;
    const StepDone step_done = [&](int64_t i) {
      if (options.progress) options.progress(before + i + 1, batches * L);
    };
    if (options.cache) {
      sample_with_cache(model, x, options, generator, step_done);
    } else {
      sample_plain(model, x, options.temperature, generator, step_done);
    }
    chunks.push_back(x);
  }
  model->train(was_training);
  return torch::cat(chunks, 0)
      .to(torch::kUInt8)
      .view({options.count, shape.height, shape.width, shape.channels});
}

SampleOptions::Decoder parse_decoder(const std::string& text, const std::string& key) {
  if (text == "auto") return SampleOptions::Decoder::kAuto;
  if (text == "dynamic") return SampleOptions::Decoder::kDynamic;
  if (text == "static") return SampleOptions::Decoder::kStatic;
  throw std::invalid_argument(key + ": expected auto, dynamic or static, got '" + text + "'");
}

bool parse_cache_dtype(const std::string& text, const std::string& key) {
  if (text == "float32") return false;
  if (text == "bfloat16") return true;
  throw std::invalid_argument(key + ": expected float32 or bfloat16, got '" + text + "'");
}

torch::Tensor for_display(const torch::Tensor& images, int64_t vocab) {
  if (vocab >= 256) return images;
  const int64_t top = vocab - 1;  // >= 1: data.bits is at least 1
  return ((images.to(torch::kLong) * 255 + top / 2) / top).to(torch::kByte);
}

}  // namespace combiner::sample
