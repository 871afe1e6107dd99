// combiner-inspect: look at one attention variant.
//   --variant: run its fast path on q, k, v from .npy files ([H, L, D], [H, L, D], [H, L, Dv]
//   float32), write the output [H, L, Dv], and optionally draw head 0's effective matrix.
//   --pattern: draw which positions each row attends directly and through which span.
// --block / --row-len have no defaults: a variant that uses one refuses to run without it.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <stdexcept>

#include "tools/inspect.h"
#include "util/cli_main.h"
#include "util/npy.h"
#include "util/runtime.h"

namespace {

namespace att = combiner::attention;

struct Flags {
  std::string variant, pattern, q, k, v, out, png, abstraction = "max";
  int64_t block = 0, row_len = 0, length = 0, scale = 0, threads = 0;
};

// Pixels per cell: about 512 pixels across unless given.
int64_t cell_scale(int64_t requested, int64_t length) {
  if (requested < 0)
    throw std::invalid_argument("--scale must be >= 1, got " + std::to_string(requested));
  return requested > 0 ? requested : std::max<int64_t>(1, 512 / length);
}

int run_variant(const Flags& f) {
  if (f.q.empty() || f.k.empty() || f.v.empty() || f.out.empty())
    throw std::invalid_argument("--variant needs --q, --k, --v and --out");
  const auto inputs = att::load_head_inputs(f.q, f.k, f.v);
  const int64_t L = inputs.q.size(1);
  const auto options = att::inspect_options(f.variant, f.block, f.row_len, f.abstraction, L);
  const auto run = att::run_fast(options, inputs);
  // The picture first: every check that can refuse happens before out.npy exists.
  if (!f.png.empty())
    att::write_panels(f.png, att::matrix_images(options, run, inputs), cell_scale(f.scale, L));
  combiner::util::save_npy(f.out, run.out);
  spdlog::info("{}: out {} -> {}", f.variant, c10::str(run.out.sizes()), f.out);
  return 0;
}

int run_pattern(const Flags& f) {
  if (f.png.empty()) throw std::invalid_argument("--pattern needs --png");
  if (f.length <= 0 || f.length > att::kMaxPatternLength)
    throw std::invalid_argument("--length must be in [1, " +
                                std::to_string(att::kMaxPatternLength) + "], got " +
                                std::to_string(f.length));
  const auto options = att::inspect_options(f.pattern, f.block, f.row_len, "max", f.length);
  att::write_panels(f.png, att::pattern_images(options, f.length), cell_scale(f.scale, f.length));
  spdlog::info("{}: pattern for L = {} -> {}", f.pattern, f.length, f.png);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-inspect", [&] {
    CLI::App app{"Run one attention variant on .npy inputs, or draw its pattern."};
    Flags f;
    const auto names = att::variant_names();
    auto* variant = app.add_option("--variant", f.variant, "run this variant on --q/--k/--v")
                        ->check(CLI::IsMember(names));
    auto* pattern = app.add_option("--pattern", f.pattern, "draw this variant's pattern")
                        ->check(CLI::IsMember(names));
    variant->excludes(pattern);
    app.add_option("--q", f.q, "queries, float32 [H, L, D] .npy");
    app.add_option("--k", f.k, "keys, float32 [H, L, D] .npy");
    app.add_option("--v", f.v, "values, float32 [H, L, Dv] .npy");
    app.add_option("--out", f.out, "output, float32 [H, L, Dv] .npy");
    app.add_option("--png", f.png, "picture: effective matrix (--variant) or pattern (--pattern)");
    app.add_option("--block", f.block, "block size s of fixed layouts (required for them)");
    app.add_option("--row-len", f.row_len, "row length W of axial layouts (required for them)");
    app.add_option("--abstraction", f.abstraction, "span summary")
        ->check(CLI::IsMember(att::abstraction_names()));
    app.add_option("--length", f.length, "sequence length L of --pattern");
    app.add_option("--scale", f.scale, "pixels per cell (default: about 512 pixels across)");
    app.add_option("--threads", f.threads, "LibTorch threads (default: every core)");
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      throw std::invalid_argument(e.what());  // one line through guarded_main, exit 1
    }
    combiner::util::set_threads(f.threads);
    if (!f.variant.empty()) return run_variant(f);
    if (!f.pattern.empty()) return run_pattern(f);
    throw std::invalid_argument("give --variant NAME (run on .npy inputs) or --pattern NAME");
  });
}
