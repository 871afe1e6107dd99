// Process-wide runtime settings the binaries apply once at start: LibTorch's thread count.
#pragma once

#include <cstdint>

namespace combiner::util {

// Sets LibTorch's intra-op threads to `threads`, or to every core when 0 (LibTorch starts at
// one thread on this machine), and flushes denormal floats to zero: Adam's second moments and
// tiny activations otherwise fall into the denormal range, where x86 arithmetic is ~100x slower
// (training here slowed from 17k to 2k tokens/s once warmup ended). Returns the thread count.
int64_t set_threads(int64_t threads);

}  // namespace combiner::util
