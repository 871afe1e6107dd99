// What every binary's main() shares: one log format, and one place that turns an exception
// into a one-line error and a non-zero exit (no exception escapes main).
#pragma once

#include <functional>

namespace combiner::util {

// Runs `body`; on an exception prints "<program>: error: <message>" to stderr and returns 1.
int guarded_main(const char* program, const std::function<int()>& body);

}  // namespace combiner::util
