// A piece of device work captured once as a CUDA graph and replayed (at::cuda::CUDAGraph): every
// launch of the work in one call, for static shapes and addresses, where hundreds of small
// kernels a step would otherwise each cost a launch. The work runs a few times on a side stream
// first (cuBLAS workspaces, lazy initialisations), the blocks those runs cached go back to the
// device, then it runs once under capture; tensors it makes live in the graph's memory pool and
// are rewritten by every replay. Host code inside the work runs at capture only: anything it
// decides (a learning rate, a step count, a skip) is frozen into the graph unless it is a device
// tensor. Dropout stays random: each replay draws from the CUDA generator's seed and offset at
// the time of the replay. Only builds against a CUDA LibTorch capture; elsewhere available() is
// false and the constructor throws.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace combiner::util {

class CapturedWork {
 public:
  // Whether this build can capture (a CUDA LibTorch) and a CUDA device is present.
  static bool available();

  // Runs `work` `warmup` times on a side stream, then captures one more run of it. Throws
  // std::runtime_error with CUDA's reason when the capture fails (an op that waits for the
  // host, a copy from pageable memory, a generator set mid-capture).
  explicit CapturedWork(const std::function<void()>& work, int warmup = 3);
  ~CapturedWork();
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  void replay();  // queued on the current stream, between two timing events
  // The last replay's time on the GPU in milliseconds (waits for it to finish); -1 before the
  // first.
  double last_replay_ms();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace combiner::util
