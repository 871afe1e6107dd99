// combiner-train: trains a model from a YAML config. Last lines: "test_bpd: <v>" (when the
// config asks for a final test evaluation) and "checkpoint: <path>", printed by rank 0 alone
// when torchrun or scripts/launch.sh starts several processes (RANK, WORLD_SIZE, ...).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "config/load.h"
#include "train/trainer.h"
#include "util/cli_main.h"

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
    const auto result = combiner::train::run_training(config, options);
    if (!result.main_process) return 0;
    if (result.test_bits_per_dim) std::printf("test_bpd: %.4f\n", *result.test_bits_per_dim);
    std::printf("checkpoint: %s\n", result.final_checkpoint.c_str());
    return 0;
  });
}
