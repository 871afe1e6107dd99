#include "util/device.h"

#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#ifdef COMBINER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace combiner::util {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

namespace {
double mib(int64_t bytes) {
  return double(bytes) / (1024.0 * 1024.0);
}

// The CPU tensor counter: bytes held now, the peak since the last reset, and every allocation's
// bytes summed.
std::atomic<int64_t> cpu_now{0}, cpu_peak{0}, cpu_total{0};
std::atomic<bool> cpu_counting{false};
std::atomic<int64_t> cpu_limit{-1};  // bytes the counted tensors may hold; < 0: no limit

void cpu_add(int64_t bytes) {
  cpu_total += bytes;
  const int64_t now = cpu_now += bytes;
  for (int64_t peak = cpu_peak.load(); now > peak && !cpu_peak.compare_exchange_weak(peak, now);) {
  }
}

// The live allocations' sizes by address, and the wrapped allocator's raw deleter that frees
// them. Each allocation's context is its address, as raw_allocate() (used inside LibTorch)
// requires. Never destroyed: tensors that LibTorch keeps in its own statics are freed at exit.
struct Sizes {
  std::mutex mutex;
  std::unordered_map<void*, int64_t> bytes;
};
Sizes& sizes() {
  static auto* live = new Sizes;
  return *live;
}
c10::DeleterFnPtr base_delete = nullptr;

void release_counted(void* data) {
  {
    auto& s = sizes();
    const std::lock_guard<std::mutex> lock(s.mutex);
    const auto it = s.bytes.find(data);
    if (it != s.bytes.end()) {
      cpu_now -= it->second;
      s.bytes.erase(it);
    }
  }
  base_delete(data);
}

// LibTorch 2.3 made allocate() non-const and added copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define COMBINER_ALLOCATE_CONST
#define COMBINER_ALLOCATOR_COPY_DATA 1
#else
#define COMBINER_ALLOCATE_CONST const
#define COMBINER_ALLOCATOR_COPY_DATA 0
#endif

class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) COMBINER_ALLOCATE_CONST override {
    const int64_t limit = cpu_limit.load();
    TORCH_CHECK(limit < 0 || cpu_now.load() + int64_t(n) <= limit,
                "DefaultCPUAllocator: not enough memory: you tried to allocate ",
                n,
                " bytes beyond the counted tensors' limit (util::limit_cpu_tensor_bytes)");
    c10::DataPtr inner = base_->allocate(n);
    if (inner.get() == nullptr) return inner;  // n == 0
    TORCH_CHECK(inner.get() == inner.get_context(),
                "count_cpu_tensor_bytes: the CPU allocator's pointers are not their own context");
    const c10::Device device = inner.device();
    void* data = inner.release_context();
    {
      auto& s = sizes();
      const std::lock_guard<std::mutex> lock(s.mutex);
      s.bytes[data] = int64_t(n);
    }
    cpu_add(int64_t(n));
    return {data, data, &release_counted, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release_counted; }
#if COMBINER_ALLOCATOR_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#endif

 private:
  c10::Allocator* base_;
};
}  // namespace

void count_cpu_tensor_bytes() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    base_delete = base->raw_deleter();
    TORCH_CHECK(base_delete != nullptr,
                "count_cpu_tensor_bytes: the CPU allocator has no raw deleter");
    static CountingAllocator counting(base);
    c10::SetCPUAllocator(&counting, /*priority=*/std::numeric_limits<uint8_t>::max());
    cpu_counting = true;
  });
}

#ifdef COMBINER_WITH_CUDA
namespace {
// StatType::AGGREGATE (all pools) is entry 0 in every LibTorch; the enum moved namespaces in 2.x.
constexpr size_t kAggregate = 0;
c10::DeviceIndex index_of(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
}  // namespace

double device_allocated_mib(const torch::Device& device) {
  if (!device.is_cuda()) return cpu_counting ? mib(cpu_now) : 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .allocated_bytes[kAggregate]
                 .current);
}

double device_peak_mib(const torch::Device& device) {
  if (!device.is_cuda()) return cpu_counting ? mib(cpu_peak) : 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .allocated_bytes[kAggregate]
                 .peak);
}

double device_reserved_peak_mib(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .reserved_bytes[kAggregate]
                 .peak);
}

double device_allocated_total_mib(const torch::Device& device) {
  if (!device.is_cuda()) return cpu_counting ? mib(cpu_total) : 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .allocated_bytes[kAggregate]
                 .allocated);
}

void reset_peak_memory(const torch::Device& device) {
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
  else
    cpu_peak = cpu_now.load();
}
#else
double device_allocated_mib(const torch::Device&) {
  return cpu_counting ? mib(cpu_now) : 0;
}
double device_peak_mib(const torch::Device&) {
  return cpu_counting ? mib(cpu_peak) : 0;
}
double device_allocated_total_mib(const torch::Device&) {
  return cpu_counting ? mib(cpu_total) : 0;
}
double device_reserved_peak_mib(const torch::Device&) {
  return 0;
}
void reset_peak_memory(const torch::Device&) {
  cpu_peak = cpu_now.load();
}
#endif

namespace {
// A number of bytes at the start of a one-line file (a cgroup's memory.max, memory.current), or
// -1 where it is missing or says "max".
double file_bytes(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stod(text);
}

// The kernel's MemAvailable, and the room left under this process's cgroup v2 limit (the root
// group's files, as a container sees them), the smaller of the two; MiB.
double cpu_available_mib() {
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) available = std::stod(line.substr(13)) / 1024.0;
  const double limit = file_bytes("/sys/fs/cgroup/memory.max");
  const double used = file_bytes("/sys/fs/cgroup/memory.current");
  if (limit >= 0 && used >= 0) {
    const double room = std::max(0.0, limit - used) / (1024.0 * 1024.0);
    available = available < 0 ? room : std::min(available, room);
  }
  return std::max(0.0, available);
}
}  // namespace

void release_cached_memory(const torch::Device& device) {
#ifdef COMBINER_WITH_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard guard(index_of(device));
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#else
  (void)device;
#endif
}

double device_available_mib(const torch::Device& device) {
#ifdef COMBINER_WITH_CUDA
  if (device.is_cuda()) {
    release_cached_memory(device);
    const c10::cuda::CUDAGuard guard(index_of(device));
    size_t free = 0, total = 0;
    C10_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return mib(int64_t(free));
  }
#endif
  TORCH_CHECK(!device.is_cuda(), "device_available_mib: this build has no CUDA");
  return cpu_available_mib();
}

void limit_cpu_tensor_bytes(double mib) {
  count_cpu_tensor_bytes();
  cpu_limit = mib < 0 ? int64_t{-1} : int64_t(mib * 1024.0 * 1024.0);
}

double process_peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

}  // namespace combiner::util
