// combiner-sample: draws images from a checkpoint, writes a PNG grid (and optionally the raw
// uint8 [N, H, W, C] array as .npy), and prints images/s.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "sample/sampler.h"
#include "train/model_loading.h"
#include "util/cli_main.h"
#include "util/image_io.h"
#include "util/npy.h"
#include "util/runtime.h"

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-sample", [&] {
    CLI::App app{"Draw images from a trained checkpoint."};
    std::string checkpoint, out = "samples.png", npy;
    combiner::sample::SampleOptions options;
    int64_t scale = 2, threads = 0;
    app.add_option("--checkpoint", checkpoint, "checkpoint file (.ckpt)")->required();
    app.add_option("--num", options.count, "images to draw");
    app.add_option("--temperature", options.temperature, "softmax temperature; 0 = argmax");
    app.add_option("--seed", options.seed, "sampling seed");
    app.add_option("--batch", options.batch, "images drawn together (default: all)");
    app.add_option("--out", out, "PNG grid to write");
    app.add_option("--npy", npy, "also write the uint8 [N, H, W, C] samples as .npy");
    app.add_option("--scale", scale, "pixel scale of the PNG grid");
    app.add_option("--threads", threads, "LibTorch threads (default: every core)");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    if (scale <= 0)
      throw std::invalid_argument("--scale must be > 0, got " + std::to_string(scale));
    combiner::util::set_threads(threads);
    auto loaded = combiner::train::load_model(checkpoint);
    const auto start = std::chrono::steady_clock::now();
    const auto images = combiner::sample::sample_images(loaded.model, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    combiner::util::write_image_grid(out, images, scale);
    if (!npy.empty()) combiner::util::save_npy(npy, images);
    spdlog::info("{} images in {:.1f}s: {:.3f} images/s",
                 options.count,
                 seconds,
                 double(options.count) / seconds);
    std::printf("samples: %s\n", out.c_str());
    return 0;
  });
}
