// The child measures, the parent only forks, waits and parses: a crash, an allocation failure or
// a hang in one case becomes a row with a status, never a lost table. Helpers live in a named
// namespace because this folder builds as unity batches.
#include "tools/attention_bench.h"

#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "attention/plan.h"
#include "attention/reference.h"
#include "tools/launch_count.h"
#include "tools/profile.h"
#include "util/device.h"
#include "util/runtime.h"

namespace combiner::attention {

namespace bench_detail {

constexpr const char* kResultTag = "bench-result";
constexpr double kMiB = 1024.0 * 1024.0;

// The profile's fused launches, one line each and their sum: the time, the distinct bytes each
// reads and writes (attention/fused/traffic.h) and its requested bytes as a multiple of them
// (re-reads L2 may catch), the bandwidth that time gives the distinct bytes and, given the card's
// (gbps > 0), the time as a multiple of the floor that bandwidth sets. "-" where nothing is
// counted (the decode kernels).
std::string launch_table(const std::vector<fused_launch::LaunchTime>& times, double gbps) {
  std::string out = fmt::format("{:>10}  {:>9}  {:>7}  {:>8}", "ms", "MiB", "reread", "GB/s");
  if (gbps > 0) out += fmt::format("  {:>9}", "x floor");
  out += "  what\n";
  const auto line = [&](double ms, const fused::Traffic& bytes, const std::string& what) {
    const bool counted = bytes.unique > 0;
    const auto number = [&](double value, const char* format) {
      return counted ? fmt::format(fmt::runtime(format), value) : std::string("-");
    };
    out += fmt::format("{:>10.3f}  {:>9}  {:>7}  {:>8}",
                       ms,
                       number(bytes.unique / kMiB, "{:.1f}"),
                       number(bytes.requested() / bytes.unique, "{:.2f}x"),
                       number(ms > 0 ? bytes.unique / (ms * 1e6) : 0.0, "{:.0f}"));
    if (gbps > 0)
      out += fmt::format("  {:>9}", number(ms / (bytes.unique / (gbps * 1e6)), "{:.1f}x"));
    out += "  " + what + "\n";
  };
  double ms = 0;
  fused::Traffic bytes;
  for (const auto& t : times) {
    line(t.ms, t.bytes, t.what);
    ms += t.ms;
    bytes += t.bytes;
  }
  line(ms, bytes, "in all");
  return out;
}

// A field of /proc/self/status ("VmRSS", "VmHWM") in MiB; 0 if it cannot be read.
double status_mib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0), so the peak seen later is this case's own.
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

bool is_allocation_failure(const std::string& message) {
  return message.find("alloc") != std::string::npos ||
         message.find("out of memory") != std::string::npos;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

torch::ScalarType scalar_type(const std::string& dtype) {
  if (dtype == "float32") return torch::kFloat;
  if (dtype == "bfloat16") return torch::kBFloat16;
  if (dtype == "float64") return torch::kDouble;
  throw std::invalid_argument("bench: dtype must be float32, bfloat16 or float64, got '" + dtype +
                              "'");
}

// Lets this process map at most `mib` more than it has now, so that a case too big for the
// machine fails an allocation (status oom) instead of waking the kernel's OOM killer, which may
// pick another process. Virtual size over-counts what becomes resident, so this errs early.
void limit_address_space(int64_t mib) {
  const double now_mib = status_mib("VmSize");
  const auto bytes = static_cast<rlim_t>((now_mib + double(mib)) * 1024.0 * 1024.0);
  rlimit limit{bytes, bytes};
  if (setrlimit(RLIMIT_AS, &limit) != 0)
    throw std::runtime_error("bench: cannot set the address-space limit");
}

// CSV cells hold no commas, quotes or line breaks.
std::string csv_safe(std::string text) {
  for (auto& ch : text)
    if (ch == ',' || ch == '"' || ch == '\n' || ch == '\r') ch = ch == ',' ? ';' : ' ';
  return text;
}

}  // namespace bench_detail

int64_t default_layout(int64_t length) {
  if (length <= 0)
    throw std::invalid_argument("bench: length must be > 0, got " + std::to_string(length));
  const double root = std::sqrt(double(length));
  int64_t best = 1;
  for (int64_t d = 1; d <= length; ++d)
    if (length % d == 0 && std::abs(double(d) - root) <= std::abs(double(best) - root)) best = d;
  return best;
}

BenchCase resolve_layout(BenchCase c) {
  if (c.block == 0) {
    c.block = default_layout(c.length);
    c.block_auto = true;
  }
  if (c.row_len == 0) {
    c.row_len = default_layout(c.length);
    c.row_len_auto = true;
  }
  return c;
}

std::string invalid_reason(const BenchCase& c) {
  try {
    validate(AttentionOptions{c.variant, c.block, c.row_len, "max"}, c.length);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::string pass_name(const BenchCase& c) {
  return c.backward ? "forward+backward" : "forward";
}

double reference_error(const std::string& variant) {
  torch::NoGradGuard no_grad;
  constexpr int64_t B = 1, H = 2, L = 36, D = 8;
  double worst = 0;
  for (const auto& abstraction : abstraction_names()) {
    if (!is_combiner(variant) && abstraction != "max") continue;
    const AttentionOptions o{variant, 6, 6, abstraction};
    torch::manual_seed(0);
    auto module = make_attention(o, L, D);
    auto q = torch::randn({B, H, L, D}), k = torch::randn({B, H, L, D}),
         v = torch::randn({B, H, L, D});
    auto fast = module->forward(q, k, v).to(torch::kDouble);
    auto reference = reference_attention(o, *module, q, k, v);
    worst = std::max(worst, (fast - reference).abs().max().item<double>());
  }
  return worst;
}

BenchResult time_case(const BenchCase& given) {
  const BenchCase c = resolve_layout(given);
  BenchResult r;
  try {
    util::set_threads(c.threads);
    const AttentionOptions o{c.variant, c.block, c.row_len, "max"};
    r.detail = invalid_reason(c);
    if (!r.detail.empty()) {
      r.status = "invalid";
      return r;
    }
    const auto dtype = bench_detail::scalar_type(c.dtype);
    const torch::Device device(c.device);
    torch::manual_seed(0);
    auto module = make_attention(o, c.length, c.dim);
    module->to(device);
    if (c.path == "composed") module->set_path(AttentionImpl::Path::kComposed);
    if (c.path == "fused") module->set_path(AttentionImpl::Path::kFused);
    // Counted tensor bytes are what the CUDA caching allocator reports on a GPU.
    const bool tensors = device.is_cuda() || c.memory == "tensors" || c.count;
    if (tensors && device.is_cpu()) util::count_cpu_tensor_bytes();
    const std::vector<int64_t> shape = {c.batch, c.heads, c.length, c.dim};
    const auto options = torch::TensorOptions().dtype(dtype).device(device);
    auto q = torch::randn(shape, options).requires_grad_(c.backward);
    auto k = torch::randn(shape, options).requires_grad_(c.backward);
    auto v = torch::randn(shape, options).requires_grad_(c.backward);
    auto grad_out = torch::randn(shape, options);
    // One run on the first `length` positions (a prefix is a valid input for every variant; the
    // whole tensors when it is all of them, so that no slice's backward is measured).
    const auto once = [&](int64_t length) {
      auto part = [&](torch::Tensor& t) {
        return length == t.size(2) ? t : t.narrow(2, 0, length);
      };
      if (c.backward) {
        for (auto* t : {&q, &k, &v}) t->mutable_grad().reset();
        module->forward(part(q), part(k), part(v)).backward(part(grad_out));
      } else {
        torch::NoGradGuard no_grad;
        module->forward(part(q), part(k), part(v));
      }
      util::synchronize(device);
    };
    // Page the variant's code in and start the thread pool on a short prefix, so that neither
    // counts as memory. The baseline then holds the inputs; the peak is what runs at full length
    // add (activations, saved tensors, and the gradients of q, k, v with --backward).
    once(std::min<int64_t>(c.length, 4 * std::max<int64_t>({c.block, c.row_len, 16})));
    for (auto* t : {&q, &k, &v}) t->mutable_grad().reset();
    // CUDA maps the device's memory into the address space: the cap would fail its start.
    if (c.max_mib > 0 && device.is_cpu()) bench_detail::limit_address_space(c.max_mib);
    bench_detail::reset_peak_rss();
    util::reset_peak_memory(device);
    const double base =
        tensors ? util::device_allocated_mib(device) : bench_detail::status_mib("VmRSS");
    once(c.length);  // warm-up, not timed
    std::vector<double> ms;
    for (int64_t t = 0; t < std::max<int64_t>(1, c.repeats); ++t) {
      const auto start = std::chrono::steady_clock::now();
      once(c.length);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    r.ms = ms[ms.size() / 2];
    const double peak = tensors ? util::device_peak_mib(device) : bench_detail::status_mib("VmHWM");
    r.peak_mib = std::max(0.0, peak - base);
    if (c.count) {  // one more run, after the measured ones, counted
      const double before = util::device_allocated_total_mib(device);
      attention::fused_launch::LaunchTimes timer;  // for each fused launch's bytes
      const tools::LaunchCounter counter;
      once(c.length);
      r.launches = counter.launches();
      r.allocated_mib = util::device_allocated_total_mib(device) - before;
      fused::Traffic moved;
      for (const auto& t : timer.times()) moved += t.bytes;
      r.kernel_mib = moved.unique / bench_detail::kMiB;
      std::string ops;
      for (const auto& [name, calls] : counter.ops()) ops += fmt::format(" {} x{}", name, calls);
      std::fprintf(stderr,
                   "count of %s L=%lld %s: %lld launches (%lld fused kernels;%s), %.2f MiB "
                   "allocated, %.2f MiB moved by the fused kernels (%.2f MiB requested)\n",
                   c.variant.c_str(),
                   static_cast<long long>(c.length),
                   pass_name(c).c_str(),
                   static_cast<long long>(r.launches),
                   static_cast<long long>(counter.fused()),
                   ops.c_str(),
                   r.allocated_mib,
                   r.kernel_mib,
                   moved.requested() / bench_detail::kMiB);
    }
    if (c.profile > 0) {  // more runs, after the measured ones: timings stay unperturbed
      const int64_t runs = std::max<int64_t>(1, c.repeats);
      const auto rows = tools::profile(
          [&] {
            for (int64_t t = 0; t < runs; ++t) once(c.length);
          },
          device.is_cuda(),
          "");
      std::fprintf(stderr,
                   "profile of %s L=%lld %s (%lld runs):\n%s",
                   c.variant.c_str(),
                   static_cast<long long>(c.length),
                   pass_name(c).c_str(),
                   static_cast<long long>(runs),
                   tools::profile_table(rows, int(c.profile), runs).c_str());
      // One more run with the fused family's launches timed one by one: a profiler sums the
      // passes of a call under one kernel name.
      attention::fused_launch::LaunchTimes timer;
      once(c.length);
      const auto times = timer.times();
      if (!times.empty())
        std::fprintf(stderr,
                     "fused launches of one run of %s L=%lld, in order (%s):\n%s",
                     c.variant.c_str(),
                     static_cast<long long>(c.length),
                     device.is_cuda() ? "CUDA events" : "the CPU model's wall clock",
                     bench_detail::launch_table(times, c.bandwidth_gbps).c_str());
    }
    r.status = "ok";
  } catch (const std::bad_alloc& e) {
    r.status = "oom";
    r.detail = e.what();
  } catch (const std::exception& e) {
    r.detail = bench_detail::first_line(e.what());
    r.status = bench_detail::is_allocation_failure(r.detail) ? "oom" : "error";
  }
  return r;
}

std::string encode_case(const BenchCase& c) {
  std::ostringstream out;
  out << "variant=" << c.variant << " length=" << c.length << " block=" << c.block
      << " row_len=" << c.row_len << " batch=" << c.batch << " heads=" << c.heads
      << " dim=" << c.dim << " dtype=" << c.dtype << " device=" << c.device
      << " backward=" << c.backward << " repeats=" << c.repeats << " threads=" << c.threads
      << " max_mib=" << c.max_mib << " path=" << c.path << " memory=" << c.memory
      << " profile=" << c.profile << " count=" << c.count << " bandwidth=" << c.bandwidth_gbps;
  return out.str();
}

BenchCase decode_case(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream in(text);
  for (std::string item; in >> item;) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("bench case: bad field '" + item + "'");
    fields[item.substr(0, eq)] = item.substr(eq + 1);
  }
  const auto get = [&](const std::string& key) {
    auto it = fields.find(key);
    if (it == fields.end()) throw std::invalid_argument("bench case: missing '" + key + "'");
    return it->second;
  };
  BenchCase c;
  c.variant = get("variant");
  c.length = std::stoll(get("length"));
  c.block = std::stoll(get("block"));
  c.row_len = std::stoll(get("row_len"));
  c.batch = std::stoll(get("batch"));
  c.heads = std::stoll(get("heads"));
  c.dim = std::stoll(get("dim"));
  c.dtype = get("dtype");
  c.device = get("device");
  c.backward = get("backward") == "1";
  c.repeats = std::stoll(get("repeats"));
  c.threads = std::stoll(get("threads"));
  c.max_mib = std::stoll(get("max_mib"));
  if (fields.count("path")) c.path = fields["path"];
  if (fields.count("memory")) c.memory = fields["memory"];
  if (fields.count("profile")) c.profile = std::stoll(fields["profile"]);
  if (fields.count("count")) c.count = fields["count"] == "1";
  if (fields.count("bandwidth")) c.bandwidth_gbps = std::stod(fields["bandwidth"]);
  return c;
}

std::string encode_result(const BenchResult& r) {
  char numbers[128];
  std::snprintf(numbers,
                sizeof numbers,
                "%.4f %.2f %lld %.4f %.4f",
                r.ms,
                r.peak_mib,
                static_cast<long long>(r.launches),
                r.allocated_mib,
                r.kernel_mib);
  return std::string(bench_detail::kResultTag) + " " + numbers + " " + r.status + " " + r.detail;
}

BenchResult decode_result(const std::string& text) {
  BenchResult r;
  std::istringstream in(text);
  std::string tag;
  if (!(in >> tag >> r.ms >> r.peak_mib >> r.launches >> r.allocated_mib >> r.kernel_mib >>
        r.status) ||
      tag != bench_detail::kResultTag) {
    r = BenchResult{};
    r.detail = "no result line from the child";
    return r;
  }
  std::getline(in >> std::ws, r.detail);
  return r;
}

BenchResult run_child(const std::vector<std::string>& argv, double timeout_s) {
  int fds[2];
  if (argv.empty() || pipe(fds) != 0) throw std::runtime_error("bench: cannot start a child");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("bench: fork failed");
  if (pid == 0) {  // only async-signal-safe calls until exec
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string output;
  bool timed_out = false;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready <= 0) continue;  // timeout slice or EINTR
    char buffer[4096];
    const ssize_t got = read(fds[0], buffer, sizeof buffer);
    if (got <= 0) break;  // the child closed stdout: it has exited
    output.append(buffer, static_cast<size_t>(got));
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  BenchResult r;
  if (timed_out) {
    r.status = "timeout";
    r.detail = "killed after " + std::to_string(int64_t(timeout_s)) + " s";
    return r;
  }
  if (WIFSIGNALED(status)) {
    r.status = WTERMSIG(status) == SIGKILL ? "oom" : "error";
    r.detail = "child killed by signal " + std::to_string(WTERMSIG(status));
    return r;
  }
  const auto at = output.rfind(bench_detail::kResultTag);
  if (at == std::string::npos) {
    r.detail =
        "child exited with status " + std::to_string(WEXITSTATUS(status)) + " and no result line";
    return r;
  }
  return decode_result(bench_detail::first_line(output.substr(at)));
}

std::string csv_header() {
  return "variant,L,block,row_len,layout,dtype,device,pass,batch,heads,dim,threads,ms,peak_mib,"
         "launches,allocated_mib,kernel_mib,status,detail";
}

std::string csv_row(const BenchCase& c, const BenchResult& r) {
  const bool block = uses_block(c.variant), row_len = uses_row_len(c.variant);
  std::string layout;
  if (block || row_len) layout = (block ? c.block_auto : c.row_len_auto) ? kAutoLayout : "given";
  char numbers[64] = ",";
  if (r.status == "ok") std::snprintf(numbers, sizeof numbers, "%.3f,%.1f", r.ms, r.peak_mib);
  char counts[96] = ",,";
  if (r.launches >= 0)
    std::snprintf(counts,
                  sizeof counts,
                  "%lld,%.1f,%s",
                  static_cast<long long>(r.launches),
                  r.allocated_mib,
                  r.kernel_mib >= 0 ? fmt::format("{:.1f}", r.kernel_mib).c_str() : "");
  std::ostringstream out;
  out << c.variant << "," << c.length << "," << (block ? std::to_string(c.block) : "") << ","
      << (row_len ? std::to_string(c.row_len) : "") << "," << layout << "," << c.dtype << ","
      << c.device << "," << pass_name(c) << "," << c.batch << "," << c.heads << "," << c.dim << ","
      << c.threads << "," << numbers << "," << counts << "," << r.status << ","
      << bench_detail::csv_safe(r.detail);
  return out.str();
}

BenchResult flash_definition(const BenchCase& c) {
  const int64_t element = c.dtype == "float32" ? 4 : c.dtype == "float64" ? 8 : 2;
  const double rows = double(c.batch * c.heads * c.length);
  const double o = rows * double(c.dim * element), lse = rows * 4;
  BenchResult r;
  r.status = "definition";
  r.detail = c.backward ? "one forward and one backward launch; o, lse, dq, dk, dv"
                        : "one forward launch; o, lse";
  r.launches = c.backward ? 2 : 1;
  r.allocated_mib = (o + lse + (c.backward ? 3 * o : 0)) / bench_detail::kMiB;
  r.kernel_mib = (4 * o + lse + (c.backward ? 8 * o + lse : 0)) / bench_detail::kMiB;
  return r;
}

int64_t available_mib() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoll(line.substr(13)) / 1024;
  return 0;
}

}  // namespace combiner::attention
