// The CPU tensor counter: the bytes of live tensors and their peak, as the CUDA caching
// allocator reports a GPU's.
#include <gtest/gtest.h>

#include "util/device.h"

namespace combiner::util {
namespace {

TEST(CpuTensorBytes, CountsLiveTensorsAndThePeak) {
  count_cpu_tensor_bytes();
  count_cpu_tensor_bytes();  // a second call changes nothing
  const torch::Device cpu(torch::kCPU);
  const double start = device_allocated_mib(cpu);
  reset_peak_memory(cpu);
  EXPECT_DOUBLE_EQ(device_peak_mib(cpu), start);
  {
    auto a = torch::empty({1024, 1024});  // 4 MiB
    auto b = torch::empty({512, 1024});   // 2 MiB
    EXPECT_NEAR(device_allocated_mib(cpu) - start, 6.0, 1e-6);
  }
  auto c = torch::empty({256, 1024}, torch::kDouble);  // 2 MiB, after a and b are gone
  EXPECT_NEAR(device_allocated_mib(cpu) - start, 2.0, 1e-6);
  EXPECT_NEAR(device_peak_mib(cpu) - start, 6.0, 1e-6);
  reset_peak_memory(cpu);
  EXPECT_NEAR(device_peak_mib(cpu) - start, 2.0, 1e-6);
}

}  // namespace
}  // namespace combiner::util
