// Drawing images from a model, one subpixel at a time. The default path is the cached decoder:
// one step per subpixel at the attention's per-position cost, either the per-variant decoder
// (model/decoder.h: the fewest terms, the CPU's default) or the one of fixed shapes
// (model/static_decoder.h), captured as a CUDA graph on a GPU, its default there. The plain path
// (cache = false) re-runs the network on the prefix (rounded up to whole image rows, which every
// attention layout accepts) at every step: O(L) forward passes, kept as the reference the cache
// is tested against. Both draw from the same generator in the same order, so the same seed gives
// the same images.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

#include "model/transformer.h"

namespace combiner::sample {

struct SampleOptions {
  int64_t count = 16;        // images to draw
  double temperature = 1.0;  // softmax temperature; 0 = argmax (deterministic)
  int64_t seed = 0;          // the sampler's own generator
  int64_t batch = 0;         // images drawn together; 0 = all at once
  bool cache = true;         // cached incremental decoding; false = plain re-run per step
  // Which cached decoder: auto (static on CUDA, dynamic elsewhere), dynamic or static.
  enum class Decoder { kAuto, kDynamic, kStatic };
  Decoder decoder = Decoder::kAuto;
  // The static decoder's q, k, v caches in bfloat16 (half the memory; attention over the rounded
  // values, so the images may differ from float32 caches' in a few subpixels); float32 otherwise.
  // Picks the static decoder under kAuto; refused with kDynamic and without the cache.
  bool bfloat16_cache = false;
  // Called once per batch of images with the decoder it uses, e.g. "static, captured".
  std::function<void(const std::string& decoder)> on_decoder;
  // After each batch drawn by a captured decoder: its replays' mean GPU time a step, in ms.
  std::function<void(double ms)> on_replay_time;
  // After each decode step: steps done and in all (L per batch of images drawn together).
  std::function<void(int64_t done, int64_t total)> progress;
};

// Returns uint8 [N, H, W, C]. Throws std::invalid_argument for count <= 0, batch < 0,
// temperature < 0 or bfloat16 caches asked of a decoder without them.
torch::Tensor sample_images(model::ImageTransformer& model, const SampleOptions& options);

// Images of subpixels below `vocab` (N-bit data: vocab 2^N) stretched to 0..255 for viewing, as
// the PNG grids show them; 8-bit images (vocab 256) unchanged.
// "auto", "dynamic" or "static"; std::invalid_argument naming `key` otherwise.
SampleOptions::Decoder parse_decoder(const std::string& text, const std::string& key);
// "float32" (false) or "bfloat16" (true): the static decoder's cache dtype; std::invalid_argument
// naming `key` otherwise.
bool parse_cache_dtype(const std::string& text, const std::string& key);

torch::Tensor for_display(const torch::Tensor& images, int64_t vocab);

}  // namespace combiner::sample
