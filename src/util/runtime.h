// Process-wide runtime settings the binaries apply once at start.
#pragma once

#include <cstdint>

namespace combiner::util {

// Sets LibTorch's intra-op threads to `threads`, or to every core when 0 (LibTorch starts at
// one thread on this machine). Returns the number in effect.
int64_t set_threads(int64_t threads);

// Applied by every binary's main (util::guarded_main), measured on this 2-core machine:
// - denormal floats are flushed to zero: Adam's second moments and tiny activations otherwise
//   fall into the denormal range, where x86 arithmetic is ~100x slower (a quick-start run fell
//   from 17k to 2k tokens/s once warmup ended);
// - glibc malloc keeps freed memory (mmap threshold 32 MiB, trim threshold 1 GiB) instead of
//   returning every large tensor to the kernel: evaluating 1000 Fashion-MNIST images went from
//   23.3 s (7.0 s system time) to 16.3 s (0.6 s), at the cost of a larger resident set.
void tune_process();

}  // namespace combiner::util
