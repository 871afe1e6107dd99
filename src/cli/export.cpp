// combiner-export: a checkpoint's model (or its moving average) as a safetensors file for Python
// and PyTorch: tensors named as in the module tree, fp32 or bf16, the resolved config in the
// header's __metadata__. Last line: "safetensors: <path>". The file is written atomically and an
// existing one is replaced only with --force.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "train/safetensors_weights.h"
#include "util/cli_main.h"

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-export", [&] {
    CLI::App app{"Export a checkpoint's model as a safetensors file."};
    std::string checkpoint, out, dtype = "float32";
    combiner::train::ExportOptions options;
    app.add_option("--checkpoint", checkpoint, "checkpoint file (.ckpt)")->required();
    app.add_option("--out", out, "safetensors file to write (e.g. model.safetensors)")->required();
    app.add_option("--dtype", dtype, "float32 | bfloat16: the floating tensors' dtype")
        ->check(CLI::IsMember({"float32", "bfloat16"}));
    app.add_flag("--ema", options.ema, "export the checkpoint's moving average of the weights");
    app.add_flag("--force", options.force, "replace --out if it exists");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    options.dtype = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
    const auto summary = combiner::train::export_safetensors(checkpoint, out, options);
    spdlog::info("{} tensors, {} values, {:.2f} MiB ({}, {} weights of step {})",
                 summary.tensors,
                 summary.parameters,
                 double(summary.bytes) / (1 << 20),
                 dtype,
                 summary.weights,
                 summary.step);
    std::printf("safetensors: %s\n", out.c_str());
    return 0;
  });
}
