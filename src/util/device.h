// What benchmarks need to time and measure work on a CUDA device as on the CPU: waiting for the
// queued kernels, and the caching allocator's peak. On a build without CUDA (Debian's LibTorch)
// CUDA devices are refused before any of this is reached, and these do nothing.
#pragma once

#include <torch/torch.h>

namespace combiner::util {

// Waits for `device`'s queued work, so a clock read after it covers that work.
void synchronize(const torch::Device& device);

// The CUDA caching allocator's bytes in use now, and its peak since reset_peak_memory, in MiB
// (0 for the CPU, whose peak benchmarks read from /proc instead).
double device_allocated_mib(const torch::Device& device);
double device_peak_mib(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);

// This process's peak resident set (VmHWM of /proc/self/status) in MiB; 0 where unreadable.
double process_peak_rss_mib();

}  // namespace combiner::util
