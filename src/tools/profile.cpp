#include "tools/profile.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace combiner::tools {

namespace profile_detail {
namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

double duration_ms(const kineto::KinetoEvent& e) {
#if TORCH_VERSION_MAJOR >= 2
  return double(e.durationNs()) * 1e-6;
#else
  return double(e.durationUs()) * 1e-3;
#endif
}

// Kernels and the copies and fills the GPU runs: the events on the CUDA device.
bool on_gpu(const kineto::KinetoEvent& e) {
  return e.deviceType() == c10::DeviceType::CUDA;
}
}  // namespace profile_detail

using namespace profile_detail;

std::vector<ProfileRow> profile(const std::function<void()>& work,
                                bool cuda,
                                const std::string& trace_path) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  kineto::prepareProfiler(config, activities);
  kineto::enableProfiler(config, activities);
  try {
    work();
    if (cuda) torch::cuda::synchronize();
  } catch (...) {
    kineto::disableProfiler();
    throw;
  }
  auto result = kineto::disableProfiler();
  if (!trace_path.empty()) result->save(trace_path);
  std::map<std::pair<bool, std::string>, ProfileRow> sums;
  for (const auto& e : result->events()) {
    ProfileRow& row = sums[{on_gpu(e), e.name()}];
    row.name = e.name();
    row.kernel = on_gpu(e);
    row.calls += 1;
    row.total_ms += duration_ms(e);
  }
  std::vector<ProfileRow> rows;
  for (auto& [key, row] : sums) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_ms > b.total_ms;
  });
  return rows;
}

bool can_save_traces() {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("combiner-trace-check-" + std::to_string(::getpid()) + ".json");
  try {
    profile([] {}, false, path);
  } catch (const std::exception&) {
    return false;
  }
  std::filesystem::remove(path);
  return true;
}

std::string profile_table(const std::vector<ProfileRow>& rows, int top, int64_t steps) {
  const double per = 1.0 / double(std::max<int64_t>(1, steps));
  double kernel_ms = 0;
  int64_t kernels = 0;
  for (const auto& r : rows)
    if (r.kernel) {
      kernel_ms += r.total_ms;
      kernels += r.calls;
    }
  std::string out;
  for (const bool kernel : {true, false}) {
    int shown = 0;
    for (const auto& r : rows) {
      if (r.kernel != kernel || shown == top) continue;
      if (shown++ == 0)
        out += kernel ? fmt::format(
                            "GPU kernels: {:.3f} ms and {:.1f} launches per step in all\n"
                            "{:>8} {:>10} {:>6}  name\n",
                            kernel_ms * per,
                            double(kernels) * per,
                            "calls",
                            "ms/step",
                            "share")
                      : fmt::format(
                            "CPU ops (inclusive: nested ops count in their callers)\n"
                            "{:>8} {:>10} {:>6}  name\n",
                            "calls",
                            "ms/step",
                            "");
      const std::string share =
          kernel && kernel_ms > 0 ? fmt::format("{:5.1f}%", 100 * r.total_ms / kernel_ms) : "";
      std::string name = r.name.size() > 110 ? r.name.substr(0, 107) + "..." : r.name;
      out += fmt::format(
          "{:>8.1f} {:>10.3f} {:>6}  {}\n", double(r.calls) * per, r.total_ms * per, share, name);
    }
  }
  return out;
}

}  // namespace combiner::tools
