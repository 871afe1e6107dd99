// combiner-train: trains a model from a YAML config. Last lines: "test_bpd: <v>" (when the
// config asks for a final test evaluation) and "checkpoint: <path>", printed by rank 0 alone
// when torchrun or scripts/launch.sh starts several processes (RANK, WORLD_SIZE, ...).
// SIGINT/SIGTERM: the step in progress finishes, a checkpoint is written, and the process exits
// with 128 + the signal's number (130, 143) after "checkpoint: <path>"; a second signal exits at
// once with that status. --print-config prints the config (the file and --set overrides, or the
// defaults) as YAML with each key's meaning, range and default, and exits without reading data.
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
    bool print_config = false;
    app.add_option("--config", config_path, "YAML config file (see configs/)");
    app.add_option("--set", overrides, "override a config key: --set train.lr=3e-4 (repeatable)");
    app.add_flag(
        "--resume", options.resume, "continue from the newest valid checkpoint in train.out_dir");
    app.add_flag("--print-config",
                 print_config,
                 "print the config (--config and --set, or the defaults) as YAML with every key's "
                 "meaning and default, then exit");
    try {
      app.parse(argc, argv);
      if (config_path.empty() && !print_config) throw CLI::RequiredError("--config");
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    if (print_config) {
      const auto config = combiner::config::read_config_with_overrides(config_path, overrides);
      std::printf("# combiner-train --print-config: %s%s\n",
                  config_path.empty() ? "the defaults" : config_path.c_str(),
                  overrides.empty() ? "" : " with --set overrides");
      std::printf("# key: value  # meaning; range; default\n%s",
                  combiner::config::to_documented_yaml(config).c_str());
      return 0;
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
