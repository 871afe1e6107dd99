// combiner-bench: measurements behind the tables in docs/.
//   attention: forward (and with --backward, forward + backward) median time and peak memory per
//   variant and length, each case in a fresh child process (this binary re-executed with the
//   hidden --child flag), after checking each variant against the dense reference.
//   train: full training steps of a config's model on random tokens; ms/step, tokens/s and
//   model FLOP utilisation against a matmul peak measured in the same run.
//   Both take --profile N: after the measured runs, more of them under LibTorch's profiler and
//   a table of their N largest GPU kernels and CPU ops (tools/profile.h).
//   kernel-check: the fused attention kernels (CUDA; their CPU model on the CPU; or, with --device
//   emulated, the CUDA source on the CPU's SIMT emulator) against the
//   LibTorch composition and the float64 dense reference, then (every variant asked for) the
//   fused LayerNorm against LibTorch's in float64, sampling's LayerNorm-and-linear kernel against
//   the ops it replaces in float64 and the decode kernel (sampling's attention step) against the
//   decoder's LibTorch ops and forward(); exits 1 if any case fails.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "attention/attention.h"
#include "config/load.h"
#include "tools/attention_bench.h"
#include "tools/decode_check.h"
#include "tools/kernel_check.h"
#include "tools/linear_check.h"
#include "tools/loss_check.h"
#include "tools/norm_check.h"
#include "tools/norm_linear_check.h"
#include "tools/train_bench.h"
#include "util/atomic_file.h"
#include "util/cli_main.h"
#include "util/runtime.h"

#ifdef COMBINER_WITH_EMULATED_KERNELS
#include "emulated/emulated.h"
#endif

namespace {

namespace att = combiner::attention;

struct AttentionFlags {
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192, 12288, 16384};
  std::string variants = "all";  // all | comma-separated names
  att::BenchCase shape;          // batch, heads, dim, layout, dtype, backward, repeats, threads
  double timeout_s = 600;        // per case
  int64_t max_mib = -1;          // per case; -1 = MemAvailable at start, 0 = no limit
  std::string out;
  std::string child;  // hidden: an encoded case to run in this process
};

struct KernelCheckFlags {
  std::string device = "cpu";
  std::vector<int64_t> dims = {32, 64, 128};
  std::string variants = "all";  // all | comma-separated names with fused kernels
  std::string sizes = "all";     // all | small (no case above L 300)
};

struct TrainFlags {
  std::string config;
  std::vector<std::string> overrides;
  combiner::train::TrainBenchOptions options;
  std::string out;
};

std::string self_path() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) throw std::runtime_error("combiner-bench: cannot find its own executable");
  return std::string(buffer, static_cast<size_t>(n));
}

std::vector<std::string> chosen_variants(const std::string& text) {
  if (text == "all") return att::variant_names();
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string name; std::getline(in, name, ',');) {
    const auto& names = att::variant_names();
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw std::invalid_argument("--variants: unknown variant '" + name + "', expected 'all' or " +
                                  c10::Join(",", names));
    out.push_back(name);
  }
  return out;
}

void write_csv(const std::string& path, const std::vector<std::string>& rows) {
  combiner::util::write_file_atomic(path, [&](std::ostream& out) {
    for (const auto& row : rows) out << row << "\n";
  });
  std::printf("results: %s\n", path.c_str());
}

int bench_attention(AttentionFlags f) {
  const auto variants = chosen_variants(f.variants);
  for (int64_t L : f.lengths)
    if (L <= 0)
      throw std::invalid_argument("--lengths: every L must be > 0, got " + std::to_string(L));
  if (f.out.empty()) throw std::invalid_argument("attention: --out is required");
  f.shape.threads = combiner::util::set_threads(f.shape.threads);
  f.shape.max_mib = f.max_mib >= 0 ? f.max_mib : att::available_mib();
  const std::string program = self_path();
  std::vector<std::string> rows = {att::csv_header()};
  std::map<int64_t, att::BenchResult> full;  // per L, for the ratios
  for (const auto& variant : variants) {
    const double error = att::reference_error(variant);
    spdlog::info("{}: fast vs reference max abs error {:.2e} (L = 36, float32)", variant, error);
    // The fused CUDA kernels are checked too before they are timed (kernel-check's cases).
    const std::string fused_error =
        f.shape.path == "auto"
            ? att::fused_mismatch(variant, f.shape.device, f.shape.dtype, f.shape.dim)
            : "";
    if (!fused_error.empty())
      spdlog::error("{}: fused kernel check failed: {}", variant, fused_error);
    for (int64_t L : f.lengths) {
      att::BenchCase c = f.shape;
      c.variant = variant;
      c.length = L;
      c = att::resolve_layout(c);
      att::BenchResult r;
      r.detail = att::invalid_reason(c);
      if (!r.detail.empty()) {
        r.status = "invalid";  // no child: the layout cannot run at this L
      } else if (error > 1e-5 || !fused_error.empty()) {
        r.status = "mismatch";
        if (!fused_error.empty()) r.detail = "fused kernel check failed (see the log)";
      } else {
        r = att::run_child({program, "attention", "--child", att::encode_case(c)}, f.timeout_s);
      }
      if (variant == "full") full[L] = r;
      const auto it = full.find(L);
      const bool ratio = r.status == "ok" && it != full.end() && it->second.status == "ok";
      spdlog::info("{} L={}{} {} {}: {} {:.1f} ms, {:.0f} MiB{}{}",
                   variant,
                   L,
                   att::uses_block(variant)     ? fmt::format(" s={}", c.block)
                   : att::uses_row_len(variant) ? fmt::format(" W={}", c.row_len)
                                                : "",
                   c.dtype,
                   att::pass_name(c),
                   r.status,
                   r.ms,
                   r.peak_mib,
                   ratio ? fmt::format(" ({:.2f}x time, {:.2f}x memory of full)",
                                       r.ms / it->second.ms,
                                       r.peak_mib / it->second.peak_mib)
                         : "",
                   r.detail.empty() ? "" : " - " + r.detail);
      rows.push_back(att::csv_row(c, r));
    }
  }
  if (f.shape.count) {  // FlashAttention's counts by its definition, per L: the floor
    for (int64_t L : f.lengths) {
      att::BenchCase c = f.shape;
      c.variant = "sdpa-flash";
      c.length = L;
      rows.push_back(att::csv_row(c, att::flash_definition(c)));
    }
  }
  write_csv(f.out, rows);
  return 0;
}

int bench_kernel_check(const KernelCheckFlags& f) {
  // emulated: the CUDA kernels' own source on the CPU's SIMT emulator, in CUDA's dtypes.
  const bool emulated = f.device == "emulated";
#ifdef COMBINER_WITH_EMULATED_KERNELS
  std::optional<combiner::emulated::EmulatedKernels> emulation;
  if (emulated) emulation.emplace();
#else
  if (emulated)
    throw std::invalid_argument(
        "--device emulated: this build has the real CUDA kernels (run them with --device cuda); "
        "the emulator is built where they are not");
#endif
  const std::string on = emulated ? "cpu" : f.device, grid = emulated ? "cuda" : f.device;
  const torch::Device device(on);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw std::invalid_argument("--device " + f.device +
                                ": this LibTorch has no CUDA, or no device is visible");
  for (int64_t d : f.dims)
    if (d <= 0)
      throw std::invalid_argument("--dims: every D must be > 0, got " + std::to_string(d));
  std::vector<std::string> variants;
  for (const auto& v : chosen_variants(f.variants)) {
    const auto& with_kernels = att::fused_variants();
    const bool fused = std::find(with_kernels.begin(), with_kernels.end(), v) != with_kernels.end();
    if (fused) variants.push_back(v);
    if (!fused && f.variants != "all") {
      std::string names;
      for (const auto& name : with_kernels) names += (names.empty() ? "" : ", ") + name;
      throw std::invalid_argument("--variants: '" + v + "' has no fused kernel (" + names + ")");
    }
  }
  std::printf("kernel-check on %s: %s; errors are max |diff| / max(1, max |expected|)\n",
              f.device.c_str(),
              device.is_cuda() ? "the CUDA kernels"
              : emulated       ? "the CUDA kernels' source on the CPU's SIMT emulator"
                               : "the kernels' CPU model");
  int64_t cases = 0, failed = 0;
  // One table: its header, then a line per case run.
  auto table = [&](const std::string& header, const auto& all, const auto& run, const auto& line) {
    std::printf("%s\n", header.c_str());
    for (const auto& c : all) {
      const auto r = run(c, on);
      std::printf("%s\n", line(c, r).c_str());
      std::fflush(stdout);
      ++cases;
      failed += r.pass ? 0 : 1;
    }
  };
  const auto sizes =
      f.sizes == "small" ? att::KernelCheckSizes::kSmall : att::KernelCheckSizes::kAll;
  std::vector<att::KernelCheckCase> chosen;
  for (const auto& c : att::kernel_check_cases(grid, f.dims, sizes))
    if (std::find(variants.begin(), variants.end(), c.variant) != variants.end())
      chosen.push_back(c);
  table(att::kernel_check_header(), chosen, att::run_kernel_check, att::kernel_check_line);
  // The block's fused kernels too: LayerNorm, sampling's step, the bias gradients, the loss.
  if (f.variants == "all") {
    namespace tools = combiner::tools;
    const bool large = f.sizes != "small";
    table(tools::norm_check_header(),
          tools::norm_check_cases(large),
          tools::run_norm_check,
          tools::norm_check_line);
    table(tools::norm_linear_check_header(),
          tools::norm_linear_check_cases(large),
          tools::run_norm_linear_check,
          tools::norm_linear_check_line);
    table(tools::decode_check_header(),
          tools::decode_check_cases(large),
          tools::run_decode_check,
          tools::decode_check_line);
    table(tools::linear_check_header(),
          tools::linear_check_cases(large),
          tools::run_linear_check,
          tools::linear_check_line);
    table(tools::loss_check_header(),
          tools::loss_check_cases(large),
          tools::run_loss_check,
          tools::loss_check_line);
  }
  std::printf(
      "kernel-check: %lld of %lld cases pass\n", (long long)(cases - failed), (long long)cases);
  return failed == 0 ? 0 : 1;
}

int bench_train(const TrainFlags& f) {
  const auto config = combiner::config::load_config_with_overrides(f.config, f.overrides);
  const auto r = combiner::train::run_train_bench(config, f.options);
  std::printf("%s\n", combiner::train::summary_line(r).c_str());
  if (!f.out.empty())
    write_csv(f.out, {combiner::train::train_csv_header(), combiner::train::train_csv_row(r)});
  return 0;
}

void add_attention_flags(CLI::App& app, AttentionFlags& f) {
  auto& s = f.shape;
  s.block = s.row_len = 0;  // auto unless given
  const std::string auto_rule = std::string("0 = ") + att::kDefaultLayoutRule +
                                "; the CSV's layout column says " + att::kAutoLayout + " or given";
  app.add_option("--lengths", f.lengths, "sequence lengths L")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--variants", f.variants, "all, or comma-separated variant names")
      ->capture_default_str();
  app.add_option("--batch", s.batch, "batch size B")->capture_default_str();
  app.add_option("--heads", s.heads, "heads H")->capture_default_str();
  app.add_option("--dim", s.dim, "head dim D (= Dv)")->capture_default_str();
  app.add_option("--block", s.block, "block s of the fixed layouts; " + auto_rule)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--row-len", s.row_len, "row length W of the axial layouts; " + auto_rule)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--dtype", s.dtype, "input dtype (scores and softmax are fp32 for bfloat16)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float64"}))
      ->capture_default_str();
  app.add_option("--device", s.device, "cpu, cuda or cuda:N (a CUDA build of LibTorch)")
      ->capture_default_str();
  app.add_flag("--backward", s.backward, "time forward + backward (pass column)");
  app.add_option("--path",
                 s.path,
                 "auto: the fused CUDA kernels where a variant has them (combiner-fixed and "
                 "the axial Combiner variants); composed: always the LibTorch composition; "
                 "fused: always the fused path (on the CPU the kernels' model: slow, for "
                 "--memory tensors)")
      ->check(CLI::IsMember({"auto", "composed", "fused"}))
      ->capture_default_str();
  app.add_option("--memory",
                 s.memory,
                 "peak_mib on the CPU: rss (the child's resident set) or tensors (bytes of "
                 "live tensors, as the CUDA caching allocator counts them on a GPU)")
      ->check(CLI::IsMember({"rss", "tensors"}))
      ->capture_default_str();
  app.add_option("--profile",
                 s.profile,
                 "N > 0: after the timed runs, profile --repeats more of each case and print "
                 "its N largest GPU kernels and CPU ops (LibTorch's profiler) to stderr, then "
                 "time one more run's fused launches one by one (each with its pass's shape: "
                 "CUDA events, or the CPU model's clock) beside the MiB each reads and writes")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--bandwidth",
                 s.bandwidth_gbps,
                 "GB/s: the card's memory bandwidth; with --profile each fused launch's time is "
                 "also given as a multiple of its floor, its distinct bytes at that bandwidth "
                 "(0 = not given)")
      ->check(CLI::Range(0.0, 100000.0))
      ->capture_default_str();
  app.add_flag("--count",
               s.count,
               "also count one more run: the device operations it launches (fused kernels and "
               "every LibTorch op of the glue; on the CPU, what a GPU would launch), the MiB "
               "of tensors it allocates and the MiB its fused kernels read and write (columns "
               "launches, allocated_mib, kernel_mib), plus an sdpa-flash row per L from "
               "FlashAttention's definition");
  app.add_option("--repeats", s.repeats, "timed runs after one warm-up (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--threads", s.threads, "LibTorch threads per case (0 = every core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--timeout", f.timeout_s, "seconds per case before it is killed (timeout row)")
      ->capture_default_str();
  app.add_option("--max-mib",
                 f.max_mib,
                 "MiB a case may map beyond its start before allocations fail (oom row); "
                 "-1 = the machine's MemAvailable at start, 0 = no limit")
      ->capture_default_str();
  app.add_option("--out", f.out, "results .csv (required)");
  app.add_option("--child", f.child)->group("");  // hidden: run one case here
}

void add_train_flags(CLI::App& app, TrainFlags& f) {
  auto& o = f.options;
  app.add_option("--config", f.config, "YAML config file (see configs/)")->required();
  app.add_option("--set", f.overrides, "override a config key: --set train.batch_size=8");
  app.add_option("--steps", o.steps, "timed training steps (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", o.threads, "LibTorch threads; -1 = train.threads of the config")
      ->capture_default_str();
  app.add_option("--matmul-size", o.matmul_size, "n of the n x n fp32 matmul peak")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--out", f.out, "also write a one-row .csv");
  app.add_option("--profile",
                 o.profile_top,
                 "N > 0: after the timed steps, profile --steps more and print their N largest "
                 "GPU kernels and CPU ops (LibTorch's profiler)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--trace", o.trace, "with --profile: also write the Chrome trace (.json) here");
  app.add_flag("--count",
               o.count,
               "count one more step: the device operations it launches (every LibTorch op that "
               "does work, and the fused attention kernels; on the CPU, what a GPU would launch)");
  app.add_option("--memory",
                 o.memory,
                 "peak_mib on the CPU: rss (the process's resident set) or tensors (bytes of live "
                 "tensors, as the CUDA caching allocator counts them on a GPU)")
      ->check(CLI::IsMember({"rss", "tensors"}))
      ->capture_default_str();
  app.add_flag("--cuda-graph",
               o.cuda_graph,
               "also capture the step as a CUDA graph (after the timed steps) and time --warmup "
               "+ --steps replays: the launches of a step in one call. A timing, not training: "
               "the update's step count is frozen at capture. Needs a CUDA device, and no "
               "whole blocks recomputed (train.activation_checkpointing; recompute_mlp is "
               "captured)");
}

}  // namespace

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-bench", [&] {
    CLI::App app{"Benchmarks: attention variants, training steps; checks of the fused kernels."};
    app.require_subcommand(1);
    AttentionFlags attention_flags;
    TrainFlags train_flags;
    auto* attention = app.add_subcommand(
        "attention", "time and peak memory per variant and length, one child process per case");
    add_attention_flags(*attention, attention_flags);
    auto* train = app.add_subcommand(
        "train",
        std::string("ms/step, tokens/s and MFU of full training steps on random tokens. ") +
            combiner::train::kFlopRule +
            " MFU = FLOPs/step / step time / the fp32 matmul peak measured in the same run "
            "with the same threads.");
    add_train_flags(*train, train_flags);
    KernelCheckFlags check_flags;
    auto* check = app.add_subcommand(
        "kernel-check",
        "the fused attention kernels against the LibTorch composition and the float64 dense "
        "reference (outputs; q, k, v, DeepSets and summary gradients; odd lengths; q, k, v as "
        "views of one packed projection), and with every variant the fused LayerNorm against "
        "LibTorch's; exit status 1 if any case fails");
    check
        ->add_option("--device",
                     check_flags.device,
                     "cpu (the kernels' CPU model), cuda[:N], or emulated (the CUDA kernels' own "
                     "source on the CPU's SIMT emulator, float32 and bfloat16: slow; builds "
                     "without the CUDA kernels)")
        ->capture_default_str();
    check->add_option("--dims", check_flags.dims, "head dims D (= Dv)")
        ->delimiter(',')
        ->capture_default_str();
    check->add_option("--variants", check_flags.variants, "all, or comma-separated variant names")
        ->capture_default_str();
    check
        ->add_option("--sizes",
                     check_flags.sizes,
                     "all, or small: only the cases up to L 300 (quick, e.g. under "
                     "compute-sanitizer); all adds L ~1600 (more than 64 summaries)")
        ->check(CLI::IsMember({"all", "small"}))
        ->capture_default_str();
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      throw std::invalid_argument(e.what());
    }
    if (train->parsed()) return bench_train(train_flags);
    if (check->parsed()) return bench_kernel_check(check_flags);
    if (!attention_flags.child.empty()) {
      const auto c = att::decode_case(attention_flags.child);
      std::printf("%s\n", att::encode_result(att::time_case(c)).c_str());
      return 0;
    }
    return bench_attention(attention_flags);
  });
}
