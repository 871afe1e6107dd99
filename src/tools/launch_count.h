// How many device operations some work launches, counted on any device: every LibTorch op that
// does work on its own (a leaf of the ops it nests: aten::matmul holds aten::mm, and only the mm
// launches) and is not a pure view or allocation, plus the fused kernels (attention's and the
// LayerNorm's). On a GPU each such op is one kernel (or copy, or fill) and each fused call the
// kernels attention/fused/kernel.h or ops/layer_norm_kernel.h says, so the CPU counts what the
// GPU would launch; the profiler's kernel count on a GPU checks it (combiner-bench attention
// --count, --profile).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace combiner::tools {

class LaunchCounter {
 public:
  LaunchCounter();  // counts from here, on every thread, until destroyed
  ~LaunchCounter();
  LaunchCounter(const LaunchCounter&) = delete;
  LaunchCounter& operator=(const LaunchCounter&) = delete;

  int64_t launches() const;  // LibTorch ops that launch + fused kernels, so far
  int64_t fused() const;     // the fused kernels among them (attention's and LayerNorm's)
  // The counted LibTorch ops by name (what the glue around the kernels costs).
  std::map<std::string, int64_t> ops() const;

  // Whether a leaf op of this name launches work on a GPU: an ATen op that is not a view, a
  // reshape, an allocation without a fill or metadata (the autograd engine's own records are
  // not ops).
  static bool launches_work(const std::string& op);
  // The ATen ops that never launch work: views and aliases, metadata, allocations left
  // uninitialised, wrappers that return their input (scripts/peer_gpu.py repeats the list).
  static const std::set<std::string>& no_work_ops();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace combiner::tools
