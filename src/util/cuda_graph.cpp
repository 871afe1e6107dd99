#include "util/cuda_graph.h"

#include <torch/torch.h>

#include <stdexcept>

#ifdef COMBINER_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace combiner::util {

#ifdef COMBINER_WITH_CUDA

struct CapturedWork::State {
  at::cuda::CUDAGraph graph;
  at::cuda::CUDAEvent start{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
  bool replayed = false;
};

bool CapturedWork::available() {
  return torch::cuda::is_available();
}

CapturedWork::CapturedWork(const std::function<void()>& work, int warmup) {
  if (!available()) throw std::runtime_error("CUDA graph capture: no CUDA device");
  state_ = std::make_unique<State>();  // a CUDAGraph asks the driver for the device on creation
  // The graph's tensors get a pool of their own: give the eager runs' cached blocks back first.
  c10::cuda::CUDACachingAllocator::emptyCache();
  const auto main = c10::cuda::getCurrentCUDAStream();
  const auto side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent queued, captured;
  queued.record(main);
  queued.block(side);  // the side stream starts after what is queued
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    for (int i = 0; i < warmup; ++i) work();
    // What the warm-up runs left cached goes back too, so that it and the graph's pool are not
    // both held: the captured run needs as much again.
    side.synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
    bool capturing = false;
    try {
      state_->graph.capture_begin();
      capturing = true;
      work();
      capturing = false;
      state_->graph.capture_end();
    } catch (const std::exception& e) {
      if (capturing) {  // end the stream's capture, which the failure left open
        try {
          state_->graph.capture_end();
        } catch (const std::exception&) {
        }
      }
      const std::string what = e.what();
      throw std::runtime_error("CUDA graph capture failed: " + what.substr(0, what.find('\n')));
    }
  }
  captured.record(side);
  captured.block(main);  // what follows on the main stream sees the captured run's results
}

void CapturedWork::replay() {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  state_->start.record(stream);
  state_->graph.replay();
  state_->end.record(stream);
  state_->replayed = true;
}

double CapturedWork::last_replay_ms() {
  if (!state_->replayed) return -1;
  state_->end.synchronize();
  return state_->start.elapsed_time(state_->end);
}

#else

struct CapturedWork::State {};

bool CapturedWork::available() {
  return false;
}

CapturedWork::CapturedWork(const std::function<void()>&, int) {
  throw std::runtime_error(
      "CUDA graph capture needs a build against a CUDA LibTorch (scripts/build-cuda.sh)");
}

void CapturedWork::replay() {}

double CapturedWork::last_replay_ms() {
  return -1;
}

#endif

CapturedWork::~CapturedWork() = default;

}  // namespace combiner::util
