// Process-wide runtime settings the binaries apply once at start.
#pragma once

#include <cstdint>
#include <string>

namespace combiner::util {

// Sets LibTorch's intra-op threads to `threads`, or to every core when 0 (LibTorch starts at
// one thread on this machine). Returns the number in effect.
int64_t set_threads(int64_t threads);

// Applied by every binary's main (util::guarded_main), measured on this 2-core machine:
// - denormal floats are flushed to zero: Adam's second moments and tiny activations otherwise
//   fall into the denormal range, where x86 arithmetic is ~100x slower (a quick-start run fell
//   from 17k to 2k tokens/s once warmup ended);
// - freed memory stays with the process instead of going back to the kernel with every large
//   tensor (page faults cost more than the math here): under jemalloc, which the build links where
//   it finds it, by runtime.cpp's malloc_conf; under glibc malloc by an mmap threshold of 32 MiB
//   and a trim threshold of 1 GiB (evaluating 1000 Fashion-MNIST images went from 23.3 s, 7.0 s
//   of it system time, to 16.3 s). jemalloc also fragments less: docs/PERFORMANCE.md, "Memory
//   allocator", has the measurements.
void tune_process();

// The malloc this process runs on: "jemalloc" (with its version and page-purging setting) when
// the build linked it, "glibc", or the file name of another one preloaded (LD_PRELOAD).
struct Allocator {
  std::string name = "glibc";
  std::string version;
  int64_t dirty_decay_ms = 0;  // jemalloc's; -1 = freed pages are never purged
  std::string describe() const;
};
Allocator allocator();

}  // namespace combiner::util
