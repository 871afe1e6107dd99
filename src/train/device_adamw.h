// AdamW for a step whose every decision stays on the device, as a step captured once as a CUDA
// graph and replayed needs (train/captured_step.h): at::_fused_adamw_ reads its learning rate and
// step counts from device tensors, and the kernel itself skips the whole update when `skip` is 1
// (a non-finite loss or gradient norm). The host still owns the step counts that checkpoints
// save: it writes the device's before each update and counts an update once it has read back
// that the update ran. The arithmetic is torch's fused AdamW; adamw_step (train/optimizer.h) runs
// the same kernel on CUDA.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace combiner::train {

class DeviceAdamW {
 public:
  // Whether this LibTorch has the fused update with a tensor learning rate on the CPU and CUDA
  // (>= 2.4). Elsewhere the constructor throws std::runtime_error.
  static bool available();

  // Gives every parameter of `optimizer` its state now (zeros and step 0, as step() makes it on a
  // first update), so that none is made inside a capture. The optimizer must outlive this, and
  // keep its state tensors: a capture holds their addresses.
  explicit DeviceAdamW(torch::optim::AdamW& optimizer);

  // Host, before an update: the learning rate, and every parameter's step count plus one.
  void prepare(double lr);
  // Device only (capturable): one update of every parameter that has a gradient, skipped when
  // `skip` (a 0-dim float tensor on the parameters' device) is 1.
  void update(const torch::Tensor& skip);
  // Host, after an update that ran: the step counts of the parameters it updated advance.
  void count_update();

 private:
  struct Group {
    std::vector<torch::Tensor> params;
    std::vector<torch::optim::AdamWParamState*> states;
    torch::Tensor lr;           // 0-dim float
    torch::Tensor steps;        // [params] float: each parameter's count after this update
    std::vector<bool> updated;  // which parameters had a gradient at the last update()
  };
  torch::optim::AdamW& optimizer_;
  std::vector<Group> groups_;
};

}  // namespace combiner::train
