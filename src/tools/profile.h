// Where a step's time goes: LibTorch's profiler (Kineto) around some work, its events summed per
// name, as a table. On a GPU the CUDA kernels are listed apart from the CPU ops: kernels do not
// nest, so their shares add up to the device's busy time; CPU ops nest (aten::matmul holds its
// aten::mm), so their totals are inclusive.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace combiner::tools {

struct ProfileRow {
  std::string name;
  bool kernel = false;  // a GPU kernel (or memcpy / memset), not a CPU op
  int64_t calls = 0;
  double total_ms = 0;
};

// Runs `work` under the profiler (CPU ops; with `cuda` also the GPU's activity, waited for) and
// returns its events summed per name and kind, largest total first. With a non-empty
// trace_path the Chrome trace is written there too (open it in Perfetto or chrome://tracing).
std::vector<ProfileRow> profile(const std::function<void()>& work,
                                bool cuda,
                                const std::string& trace_path);

// Whether this LibTorch can write a trace (it has Kineto: pip's does, Debian's 1.13 does not);
// the tables need none. Tries once, with an empty profile, into a temporary file.
bool can_save_traces();

// The `top` largest rows of each kind as text: calls, ms per step (total / steps), and each
// kernel's share of all kernels' time.
std::string profile_table(const std::vector<ProfileRow>& rows, int top, int64_t steps);

}  // namespace combiner::tools
