// combiner-eval: bits/dim of a checkpoint (or an exported .safetensors file) on a split. Last
// line: "<split>_bpd: <value>". Under torchrun or scripts/launch.sh the processes share the
// images and rank 0 alone prints. --heatmap also goes to TensorBoard, in a folder of its own per
// evaluated checkpoint (eval-step-<step>-<split>) inside the run's tb/ folder when the checkpoint
// lies in <run>/checkpoints/, or inside --tensorboard DIR.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>

#include "data/dataset.h"
#include "train/distributed.h"
#include "train/evaluate.h"
#include "train/model_loading.h"
#include "train/tensorboard_log.h"
#include "util/cli_main.h"
#include "util/image_io.h"
#include "util/npy.h"
#include "util/progress.h"
#include "util/runtime.h"

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-eval", [&] {
    CLI::App app{"Bits per dimension of a checkpoint on a dataset split."};
    std::string checkpoint, split_name = "test", dump_bits, heatmap, tensorboard;
    std::vector<std::string> overrides;
    int64_t batch_size = 0, threads = 0;
    bool ema = false;
    app.add_option("--checkpoint", checkpoint, "checkpoint (.ckpt) or exported .safetensors file")
        ->required();
    app.add_option("--split", split_name, "test | val | train")
        ->check(CLI::IsMember({"test", "val", "train"}));
    app.add_option(
        "--set", overrides, "override a key of the checkpoint's config, e.g. data.dir=...");
    app.add_option("--dump-bits", dump_bits, "write float32 [N, L] bits per subpixel to this .npy");
    app.add_option("--heatmap", heatmap, "write the mean bits per subpixel as a PNG heatmap");
    app.add_option("--tensorboard",
                   tensorboard,
                   "with --heatmap: the TensorBoard folder whose eval-step-<step>-<split>/ "
                   "gets the heatmap and bits/dim (default: the run's tb/ when the checkpoint "
                   "is in <run>/checkpoints/)");
    app.add_option("--batch-size", batch_size, "images per batch (default: the config's)");
    app.add_option("--threads",
                   threads,
                   "LibTorch threads (default: every core, shared by the local processes)");
    app.add_flag("--ema", ema, "use the checkpoint's moving average of the weights");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    const auto launch = combiner::train::read_launch_environment();
    combiner::util::set_threads(combiner::train::threads_for(threads, launch));
    auto loaded = combiner::train::load_model(checkpoint, overrides, ema);
    const auto& t = loaded.config.train;
    const auto device = combiner::train::resolve_device(t.device, launch);
    const combiner::train::Distributed dist(
        launch, device, {std::chrono::seconds(t.dist_timeout_s)});
    if (!dist.is_main()) spdlog::set_level(spdlog::level::err);
    loaded.model->to(device);
    const auto split = combiner::data::parse_split(split_name);
    const auto images = combiner::data::load_split(loaded.config.data, split);
    if (batch_size <= 0) batch_size = t.eval_batch_size > 0 ? t.eval_batch_size : t.batch_size;
    const bool keep = !dump_bits.empty() || !heatmap.empty();
    combiner::util::Progress progress("eval " + split_name, "images", images.count);
    const auto result = combiner::train::evaluate(
        loaded.model, images, batch_size, keep, dist, [&](int64_t done, int64_t total) {
          if (dist.is_main()) progress.update(done * images.count / std::max<int64_t>(total, 1));
        });
    if (!dist.is_main()) return 0;
    if (!dump_bits.empty()) combiner::util::save_npy(dump_bits, result.bits);
    if (!heatmap.empty()) {
      // Mean bits per subpixel, laid out as the image: [H, W * C] with channels side by side.
      const auto& s = images.shape;
      auto mean = result.bits.mean(0).view({s.height, s.width, s.channels});
      const auto png =
          combiner::util::heatmap_png(heatmap, mean.permute({0, 2, 1}).reshape({s.height, -1}), 8);
      combiner::util::write_png(heatmap, png);
      if (tensorboard.empty() && loaded.config.train.tensorboard)
        tensorboard = combiner::train::run_tensorboard_folder(checkpoint).value_or("");
      if (!tensorboard.empty()) {
        combiner::train::TensorBoardLog log(
            combiner::train::eval_tensorboard_folder(
                tensorboard, loaded.step, split_name, loaded.weights),
            loaded.step,
            true);
        log.image("eval/" + split_name + "_bits_heatmap", loaded.step, png);
        log.scalar("eval/" + split_name + "_bpd", loaded.step, result.bits_per_dim);
        if (log.writing()) spdlog::info("heatmap and bits/dim also in {}", log.path());
      }
    }
    const int64_t bits = loaded.config.data.bits;
    spdlog::info("{} images of {}/{}, step {} {} weights{}",
                 result.images,
                 loaded.config.data.dataset,
                 split_name,
                 loaded.step,
                 loaded.weights,
                 bits > 0 && bits < 8 ? fmt::format("; bits/dim of {}-bit data", bits) : "");
    std::printf("%s_bpd: %.4f\n", split_name.c_str(), result.bits_per_dim);
    return 0;
  });
}
