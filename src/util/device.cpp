#include "util/device.h"

#include <fstream>
#include <string>

#ifdef COMBINER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace combiner::util {

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

#ifdef COMBINER_WITH_CUDA
namespace {
// StatType::AGGREGATE (all pools) is entry 0 in every LibTorch; the enum moved namespaces in 2.x.
constexpr size_t kAggregate = 0;
double mib(int64_t bytes) {
  return double(bytes) / (1024.0 * 1024.0);
}
c10::DeviceIndex index_of(const torch::Device& device) {
  return device.has_index() ? device.index() : c10::cuda::current_device();
}
}  // namespace

double device_allocated_mib(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .allocated_bytes[kAggregate]
                 .current);
}

double device_peak_mib(const torch::Device& device) {
  if (!device.is_cuda()) return 0;
  return mib(c10::cuda::CUDACachingAllocator::getDeviceStats(index_of(device))
                 .allocated_bytes[kAggregate]
                 .peak);
}

void reset_peak_memory(const torch::Device& device) {
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(index_of(device));
}
#else
double device_allocated_mib(const torch::Device&) {
  return 0;
}
double device_peak_mib(const torch::Device&) {
  return 0;
}
void reset_peak_memory(const torch::Device&) {}
#endif

double process_peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

}  // namespace combiner::util
