// What benchmarks need to time and measure work on a CUDA device as on the CPU: waiting for the
// queued kernels, and the caching allocator's peak. On a build without CUDA (Debian's LibTorch)
// CUDA devices are refused before any of this is reached, and these do nothing.
#pragma once

#include <torch/torch.h>

namespace combiner::util {

// Waits for `device`'s queued work, so a clock read after it covers that work.
void synchronize(const torch::Device& device);

// The CUDA caching allocator's bytes in use now, and its peak since reset_peak_memory, in MiB.
// For the CPU: the counts of count_cpu_tensor_bytes once it was called, else 0 (benchmarks read
// the resident set from /proc instead).
double device_allocated_mib(const torch::Device& device);
double device_peak_mib(const torch::Device& device);
void reset_peak_memory(const torch::Device& device);
// CUDA: the caching allocator's reserved bytes at their peak since reset_peak_memory (what the
// driver gave it: the allocated peak plus its rounding and fragmentation), MiB; 0 elsewhere.
double device_reserved_peak_mib(const torch::Device& device);
// Every allocation's bytes summed since the process began (the caching allocator's allocated
// count; on the CPU the counter's, once counting): the difference around some work is what it
// allocated, however much of it was freed again.
double device_allocated_total_mib(const torch::Device& device);

// Counts the bytes of every tensor LibTorch allocates on the CPU from now on, as the CUDA
// caching allocator counts its own: it wraps the CPU allocator (installed once; later calls do
// nothing). Afterwards device_allocated_mib, device_peak_mib and reset_peak_memory report and
// reset these counts for CPU devices: the memory a GPU run would hold, measured on the CPU,
// without the allocator's and the process's own pages that the resident set also holds.
void count_cpu_tensor_bytes();

// From now on a CPU tensor allocation that would take the counted bytes above `mib` fails as the
// CPU allocator fails when memory runs out (c10::Error "...not enough memory..."): a device's
// memory emulated on the CPU, for tests. A negative `mib` lifts the limit. Starts counting.
void limit_cpu_tensor_bytes(double mib);

// What `device` could still give a new allocation, in MiB: on CUDA the driver's free memory after
// the caching allocator has returned its unused blocks (what other processes hold is not free);
// on the CPU the kernel's MemAvailable, or less where the process's cgroup has a lower limit.
double device_available_mib(const torch::Device& device);

// CUDA: the caching allocator's unused blocks returned to the driver; nothing elsewhere.
void release_cached_memory(const torch::Device& device);

// This process's peak resident set (VmHWM of /proc/self/status) in MiB; 0 where unreadable.
double process_peak_rss_mib();

}  // namespace combiner::util
