// combiner-bench: measurements behind the tables in docs/.
//   attention: forward (and with --backward, forward + backward) median time and peak memory per
//   variant and length, each case in a fresh child process (this binary re-executed with the
//   hidden --child flag), after checking each variant against the dense reference.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <map>
#include <stdexcept>

#include "attention/attention.h"
#include "attention/bench.h"
#include "util/atomic_file.h"
#include "util/cli_main.h"
#include "util/runtime.h"

namespace {

namespace att = combiner::attention;

struct AttentionFlags {
  std::vector<int64_t> lengths = {3072};
  std::string variants = "all";  // all | comma-separated names
  att::BenchCase shape;          // batch, heads, dim, layout, dtype, backward, repeats, threads
  double timeout_s = 600;        // per case
  std::string out;
  std::string child;  // hidden: an encoded case to run in this process
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

int bench_attention(const AttentionFlags& f) {
  if (f.out.empty()) throw std::invalid_argument("attention: --out is required");
  const auto variants = chosen_variants(f.variants);
  const std::string program = self_path();
  std::vector<std::string> rows = {att::csv_header()};
  std::map<int64_t, att::BenchResult> full;  // per L, for the ratios
  for (const auto& variant : variants) {
    const double error = att::reference_error(variant);
    spdlog::info("{}: fast vs reference max abs error {:.2e} (L = 36, float32)", variant, error);
    for (int64_t L : f.lengths) {
      att::BenchCase c = f.shape;
      c.variant = variant;
      c.length = L;
      att::BenchResult r;
      if (error > 1e-5) {
        r.status = "mismatch";
      } else {
        r = att::run_child({program, "attention", "--child", att::encode_case(c)}, f.timeout_s);
      }
      if (variant == "full") full[L] = r;
      const auto it = full.find(L);
      const bool ratio = r.status == "ok" && it != full.end() && it->second.status == "ok";
      spdlog::info("{} L={}: {} {:.1f} ms, {:.0f} MiB{}{}",
                   variant,
                   L,
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
  combiner::util::write_file_atomic(f.out, [&](std::ostream& out) {
    for (const auto& row : rows) out << row << "\n";
  });
  std::printf("results: %s\n", f.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return combiner::util::guarded_main("combiner-bench", [&] {
    CLI::App app{"Benchmarks: attention variants."};
    app.require_subcommand(1);
    AttentionFlags f;
    auto& s = f.shape;
    auto* attention = app.add_subcommand("attention", "time and peak memory per variant");
    attention->add_option("--lengths", f.lengths, "sequence lengths L")->delimiter(',');
    attention->add_option("--variants", f.variants, "all, or comma-separated variant names");
    attention->add_option("--batch", s.batch, "batch size B");
    attention->add_option("--heads", s.heads, "heads H");
    attention->add_option("--dim", s.dim, "head dim D (= Dv)");
    attention->add_option("--block", s.block, "block s of the fixed layouts");
    attention->add_option("--row-len", s.row_len, "row length W of the axial layouts");
    attention->add_option("--dtype", s.dtype, "input dtype")
        ->check(CLI::IsMember({"float32", "float64"}));
    attention->add_flag("--backward", s.backward, "time forward + backward");
    attention->add_option("--repeats", s.repeats, "timed runs after one warm-up (median)")
        ->check(CLI::PositiveNumber);
    attention->add_option("--threads", s.threads, "LibTorch threads per case (0 = every core)");
    attention->add_option("--timeout", f.timeout_s, "seconds per case before it is killed");
    attention->add_option("--out", f.out, "results .csv");
    attention->add_option("--child", f.child)->group("");  // hidden: run one case here
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      throw std::invalid_argument(e.what());
    }
    if (!f.child.empty()) {
      std::printf("%s\n", att::encode_result(att::time_case(att::decode_case(f.child))).c_str());
      return 0;
    }
    combiner::util::set_threads(s.threads);
    return bench_attention(f);
  });
}
