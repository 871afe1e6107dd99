// Process-wide runtime settings the binaries apply once at start: LibTorch's thread count.
#pragma once

#include <cstdint>

namespace combiner::util {

// Sets LibTorch's intra-op threads to `threads`, or to every core when 0 (LibTorch starts at
// one thread on this machine). Returns the number in effect.
int64_t set_threads(int64_t threads);

}  // namespace combiner::util
