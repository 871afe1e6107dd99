// combiner-sample: draws images from a checkpoint or an exported .safetensors file (or, for speed
// measurements, from the untrained model of a config), writes a PNG grid and optionally the raw
// uint8 [N, H, W, C] array as .npy, and prints images/s. Cached decoding by default; --no-cache
// re-runs the network per subpixel. The model runs on the config's train.device (auto: a GPU when
// LibTorch sees one); the draws themselves are on the CPU either way.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "config/load.h"
#include "sample/sampler.h"
#include "train/distributed.h"
#include "train/model_loading.h"
#include "util/cli_main.h"
#include "util/image_io.h"
#include "util/npy.h"
#include "util/progress.h"
#include "util/runtime.h"

namespace {

namespace cb = combiner;

// The untrained model of a config: initialised from train.seed, as a fresh run would be.
cb::train::LoadedModel untrained_model(const std::string& path,
                                       const std::vector<std::string>& overrides) {
  cb::train::LoadedModel loaded;
  loaded.config = cb::config::load_config_with_overrides(path, overrides);
  torch::manual_seed(static_cast<uint64_t>(loaded.config.train.seed));
  loaded.model =
      cb::model::ImageTransformer(cb::model::TransformerOptions::from_config(loaded.config));
  loaded.weights = "untrained";
  return loaded;
}

}  // namespace

int main(int argc, char** argv) {
  return cb::util::guarded_main("combiner-sample", [&] {
    CLI::App app{"Draw images from a trained checkpoint."};
    std::string checkpoint, config, out = "samples.png", npy;
    std::vector<std::string> overrides;
    cb::sample::SampleOptions options;
    int64_t scale = 2, threads = 0;
    bool no_cache = false, ema = false;
    std::string decoder = "auto", decoder_used, cache_dtype = "float32";
    auto* from_checkpoint = app.add_option(
        "--checkpoint", checkpoint, "checkpoint (.ckpt) or exported .safetensors file");
    auto* from_config = app.add_option(
        "--config", config, "sample the untrained model of this config (speed measurements)");
    from_checkpoint->excludes(from_config);
    app.add_option("--set",
                   overrides,
                   "override a key of the config (--config's, or the checkpoint's: e.g. "
                   "train.device=cuda), e.g. model.layers=2");
    app.add_option("--num", options.count, "images to draw");
    app.add_option("--temperature", options.temperature, "softmax temperature; 0 = argmax");
    app.add_option("--seed", options.seed, "sampling seed");
    app.add_option("--batch", options.batch, "images drawn together (default: all)");
    app.add_option("--out", out, "PNG grid to write");
    app.add_option("--npy", npy, "also write the uint8 [N, H, W, C] samples as .npy");
    app.add_option("--scale", scale, "pixel scale of the PNG grid");
    app.add_flag("--no-cache", no_cache, "re-run the network on the prefix at every subpixel");
    app.add_option("--decoder",
                   decoder,
                   "cached decoder: dynamic (per variant, fewest terms), static (fixed shapes, "
                   "captured as a CUDA graph on a GPU) or auto (static on CUDA)");
    app.add_option("--cache-dtype",
                   cache_dtype,
                   "the static decoder's q, k, v caches: float32, or bfloat16 (half the memory; "
                   "picks the static decoder under --decoder auto)");
    app.add_flag("--ema", ema, "use the checkpoint's moving average of the weights");
    app.add_option("--threads", threads, "LibTorch threads (default: every core)");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    if (checkpoint.empty() == config.empty())
      throw std::invalid_argument(
          "give --checkpoint FILE (or --config FILE for an untrained model)");
    if (scale <= 0)
      throw std::invalid_argument("--scale must be > 0, got " + std::to_string(scale));
    if (ema && checkpoint.empty()) throw std::invalid_argument("--ema needs --checkpoint");
    options.cache = !no_cache;
    options.decoder = cb::sample::parse_decoder(decoder, "--decoder");
    options.bfloat16_cache = cb::sample::parse_cache_dtype(cache_dtype, "--cache-dtype");
    options.on_decoder = [&](const std::string& used) {
      if (decoder_used.empty()) spdlog::info("decoder: {}", used);
      decoder_used = used;
    };
    cb::util::set_threads(threads);
    auto loaded = checkpoint.empty() ? untrained_model(config, overrides)
                                     : cb::train::load_model(checkpoint, overrides, ema);
    auto& model = loaded.model;
    const auto device =
        cb::train::resolve_device(loaded.config.train.device, cb::train::read_launch_environment());
    model->to(device);
    // train.attention_path picks the kernels here too: auto (the fused attention step and
    // LayerNorms on a GPU), composed (LibTorch's ops) or fused (their CPU models on the CPU).
    cb::model::set_kernel_path(*model, loaded.config.train.attention_path);
    const int64_t batch = options.batch > 0 ? options.batch : options.count;
    const int64_t batches = options.count > 0 ? (options.count + batch - 1) / batch : 0;
    cb::util::Progress progress(
        fmt::format("sample ({} images, {} at a time)", options.count, batch),
        "steps",
        batches * model->options().length());
    options.progress = [&](int64_t done, int64_t) { progress.update(done); };
    double replay_ms = -1;  // the captured steps' GPU time, against the whole step's below
    options.on_replay_time = [&](double ms) { replay_ms = ms; };
    const auto start = std::chrono::steady_clock::now();
    const auto images = cb::sample::sample_images(model, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cb::util::write_image_grid(out, cb::sample::for_display(images, model->options().vocab), scale);
    if (!npy.empty()) cb::util::save_npy(npy, images);
    spdlog::info("{} images of L = {} in {:.2f}s ({}, {} weights, {}): {:.3f} images/s",
                 options.count,
                 model->options().length(),
                 seconds,
                 options.cache
                     ? "cached, " + decoder_used.substr(0,
                                                        std::min(decoder_used.find(", captured"),
                                                                 decoder_used.find(", op by op")))
                     : "uncached",
                 loaded.weights,
                 device.str(),
                 double(options.count) / seconds);
    if (replay_ms >= 0 && options.count > 0)
      spdlog::info("graph replays: {:.3f} ms of GPU time a step, of {:.3f} ms a step in all",
                   replay_ms,
                   1e3 * seconds / double(batches * model->options().length()));
    std::printf("samples: %s\n", out.c_str());
    return 0;
  });
}
