// The training step as one piece of device work with fixed inputs, so that CUDA can capture it
// once as a graph and replay it (util::CapturedWork): forward and backward of every micro-batch,
// clipping, AdamW and the EMA, with nothing read back inside. What changes from step to step lives
// in device tensors written before each run: the micro-batches (copied into buffers of their own),
// the learning rate and step counts (DeviceAdamW), a factor on the loss (1, or NaN for the
// trainer's fault-injection tests). Whether the update is skipped for a non-finite loss or
// gradient norm is decided on the device. After the run, loss and norm come back in one copy,
// as in the step launched op by op, and the host counts the update if it ran.
// Where a capture is not possible the same work runs uncaptured (the CPU tests run it so).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/transformer.h"
#include "train/device_adamw.h"
#include "train/ema.h"

namespace combiner::util {
class CapturedWork;
}

namespace combiner::train {

class StaticStep {
 public:
  // Why the step of `t` on `device` in a run of `world_size` processes cannot be captured, or ""
  // when it can: train.cuda_graph off, not CUDA, several processes (their all-reduce runs
  // between backward and update), whole blocks recomputed in backward (that sets the generator's
  // state again; the MLP halves alone keep their masks and can be captured), a LibTorch without
  // DeviceAdamW or without CUDA. `t` holds the run's plan (train/memory_plan.h's with_plan: an
  // activation_checkpointing of auto is decided before this).
  static std::string why_not_captured(const config::TrainConfig& t,
                                      const torch::Device& device,
                                      int64_t world_size);

  // The step of `model` with `optimizer` (and `ema`, if not empty) for micro-batches of
  // [micro, length] bytes; t.grad_accum of them make one update. With `capture`, the first run()
  // captures the work (after two warm-up runs whose update is skipped); a capture that fails is
  // reported by capture_error() and the work then runs uncaptured.
  StaticStep(model::ImageTransformer model,
             torch::optim::AdamW& optimizer,
             NamedTensors& ema,
             const config::TrainConfig& t,
             int64_t micro,
             int64_t length,
             bool capture);
  ~StaticStep();
  StaticStep(const StaticStep&) = delete;
  StaticStep& operator=(const StaticStep&) = delete;

  struct Numbers {
    double bits = 0;       // the loss, mean bits/dim over the micro-batches
    double grad_norm = 0;  // before clipping
    bool updated = false;  // both finite: the update ran
  };
  // One update from `batches` (t.grad_accum tensors of [micro, length] on the model's device) at
  // learning rate `lr`, the loss made NaN when `poisoned`, dropout drawn from `dropout_seed`
  // when given (else the generator goes on as it is).
  Numbers run(const std::vector<torch::Tensor>& batches,
              double lr,
              bool poisoned,
              std::optional<uint64_t> dropout_seed);

  bool captured() const { return graph_ != nullptr; }
  const std::string& capture_error() const { return capture_error_; }

 private:
  void work();  // the device work: what a capture records

  model::ImageTransformer model_;
  std::vector<torch::Tensor> parameters_;
  NamedTensors& ema_;
  const config::TrainConfig t_;
  DeviceAdamW adamw_;
  std::vector<torch::Tensor> batches_;  // the micro-batches' own buffers
  torch::Tensor factor_;                // 0-dim float: the loss's factor, 1 or NaN
  torch::Tensor numbers_;               // [2] double: loss and gradient norm of the last run
  bool capture_;
  std::unique_ptr<util::CapturedWork> graph_;
  std::string capture_error_;
};

}  // namespace combiner::train
