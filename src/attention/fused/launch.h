// The fused family's one way to run a kernel: on the device of the tensor it reads, the CUDA
// kernel (CUDA builds) or its CPU model, on the current stream, counted as the launches a GPU
// makes for it (fused_kernel_launches, combiner-bench --count).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "attention/fused/decode_kernel.h"
#include "attention/fused/decode_summary.h"
#include "attention/fused/kernel.h"
#include "attention/fused/traffic.h"

namespace combiner::attention::fused_launch {

// Each launch in turn, timed, for combiner-bench's profile: while a LaunchTimes lives, every call
// below on this thread is recorded with what it ran (the kernel and its pass's shape) and its
// time: CUDA events around it on the current stream, or the CPU model's wall clock. A profiler
// groups kernels by name, which the passes of one call share; this tells them apart. Each is
// also counted in bytes of global memory (traffic.h; none for the decode kernels), the floor its
// time is read against.
struct LaunchTime {
  std::string what;     // e.g. "forward: queries 32 x 96, keys 32 x 96, causal"
  int64_t kernels = 0;  // GPU kernels the call launches (a backward: 2 or 3)
  double ms = 0;
  fused::Traffic bytes;
};
class LaunchTimes {
 public:
  LaunchTimes();
  ~LaunchTimes();
  LaunchTimes(const LaunchTimes&) = delete;
  LaunchTimes& operator=(const LaunchTimes&) = delete;
  // The calls so far, in order (waits for the GPU's events).
  std::vector<LaunchTime> times();

  struct Record;  // launch.cpp: a call's description and its clock or events
  void add(std::unique_ptr<Record> record);

 private:
  std::vector<std::unique_ptr<Record>> records_;
  LaunchTimes* outer_;  // the one this replaced on its thread
};

// What runs the kernels on host memory (tensors on the CPU): their CPU models, unless a table of
// other implementations is installed. The CPU build's tests install the CUDA kernels' own source
// run by the SIMT emulator (emulated/emulated.h), so kernel-check and the fused path's tests run
// the kernels themselves. A null entry leaves that kernel's CPU model.
struct HostKernels {
  void (*forward)(const fused::Forward&, void* stream) = nullptr;
  void (*forward_pair)(const fused::ForwardPair&, void* stream) = nullptr;
  void (*delta)(const fused::Delta&, void* stream) = nullptr;
  void (*backward)(const fused::Backward&, void* stream) = nullptr;
  void (*backward_pair)(const fused::BackwardPair&, void* stream) = nullptr;
  void (*running_max_forward)(const fused::RunningMaxes&, void* stream) = nullptr;
  void (*running_max_backward)(const fused::RunningMaxes&, void* stream) = nullptr;
  void (*segment_max_forward)(const fused::SegmentMaxes&, void* stream) = nullptr;
  void (*segment_max_backward)(const fused::SegmentMaxes&, void* stream) = nullptr;
  void (*decode_step)(const fused::DecodeStep&, void* stream) = nullptr;
  void (*decode_summaries)(const fused::DecodeSummaries&, void* stream) = nullptr;
};
// Installs `kernels` (nullptr: the CPU models) and returns the table it replaces.
const HostKernels* set_host_kernels(const HostKernels* kernels);

void forward(const torch::Tensor& on, const fused::Forward& f);
// Two passes in one launch (fused::pairable(f.first, f.second)).
void forward_pair(const torch::Tensor& on, const fused::ForwardPair& f);
void delta(const torch::Tensor& on, const fused::Delta& d);
void backward(const torch::Tensor& on, const fused::Backward& b);
// Two one-CTA-per-segment backwards in one launch, or two walks in two (fused::pairable(b.first,
// b.second)).
void backward_pair(const torch::Tensor& on, const fused::BackwardPair& b);
// The scans: every part in one launch.
void running_max(const torch::Tensor& on, const fused::RunningMaxes& r);
void running_max_backward(const torch::Tensor& on, const fused::RunningMaxes& r);
void segment_max(const torch::Tensor& on, const fused::SegmentMaxes& m);
void segment_max_backward(const torch::Tensor& on, const fused::SegmentMaxes& m);
// One cached decode step, and the span summaries made before one (attention/static_decode.h).
void decode_step(const torch::Tensor& on, const fused::DecodeStep& s);
void decode_summaries(const torch::Tensor& on, const fused::DecodeSummaries& s);

}  // namespace combiner::attention::fused_launch
