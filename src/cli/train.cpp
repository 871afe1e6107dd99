// combiner-train: trains a model from a YAML config. Last lines: "test_bpd: <v>" (when the
// config asks for a final test evaluation) and "checkpoint: <path>", printed by rank 0 alone
// when torchrun or scripts/launch.sh starts several processes (RANK, WORLD_SIZE, ...).
// SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written, and the process exits
// with 128 + the signal's number (130, 143) after "checkpoint: <path>"; a second signal exits at
// once with that status.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "config/load.h"
#include "train/trainer.h"
#include "util/cli_main.h"
#include "util/stop_signal.h"

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-train", [&] {
    CLI::App app{"Train an autoregressive image transformer with Combiner attention."};
    std::string config_path;
    std::vector<std::string> overrides;
    combiner::train::RunOptions options;
    app.add_option("--config", config_path, "YAML config file (see configs/)")->required();
    app.add_option("--set", overrides, "override a config key: --set train.lr=3e-4 (repeatable)");
    app.add_flag(
        "--resume", options.resume, "continue from the newest valid checkpoint in train.out_dir");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    options.launch = combiner::train::read_launch_environment();
    const auto config = combiner::config::load_config_with_overrides(config_path, overrides);
    combiner::util::install_stop_handlers();
    const auto result = combiner::train::run_training(config, options);
    const int status = result.stop_signal != 0 ? 128 + result.stop_signal : 0;
    if (!result.main_process) return status;
    if (result.test_bits_per_dim) std::printf("test_bpd: %.4f\n", *result.test_bits_per_dim);
    std::printf("checkpoint: %s\n", result.final_checkpoint.c_str());
    return status;
  });
}
