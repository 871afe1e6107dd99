#include "train/captured_step.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "train/bits.h"
#include "train/optimizer.h"
#include "util/cuda_graph.h"

namespace combiner::train {

std::string StaticStep::why_not_captured(const config::TrainConfig& t,
                                         const torch::Device& device,
                                         int64_t world_size) {
  if (t.cuda_graph == "off") return "train.cuda_graph off";
  if (!device.is_cuda()) return "the step runs on " + device.str() + ", not CUDA";
  if (world_size > 1)
    return std::to_string(world_size) +
           " processes: the gradients' all-reduce runs between "
           "backward and the update";
  if (t.activation_checkpointing == "true")
    return "train.activation_checkpointing sets the generator's state again in backward, which "
           "a capture cannot hold (train.recompute_mlp keeps its masks instead)";
  if (!DeviceAdamW::available()) return "this LibTorch has no fused AdamW with a tensor rate";
  if (!util::CapturedWork::available()) return "this build cannot capture CUDA graphs";
  return "";
}

StaticStep::StaticStep(model::ImageTransformer model,
                       torch::optim::AdamW& optimizer,
                       NamedTensors& ema,
                       const config::TrainConfig& t,
                       int64_t micro,
                       int64_t length,
                       bool capture)
    : model_(std::move(model)),
      parameters_(model_->parameters()),
      ema_(ema),
      t_(t),
      adamw_(optimizer),
      capture_(capture) {
  const auto device = parameters_.front().device();
  for (int64_t m = 0; m < t.grad_accum; ++m)
    batches_.push_back(torch::zeros({micro, length}, torch::dtype(torch::kByte).device(device)));
  factor_ = torch::ones({}, torch::dtype(torch::kFloat).device(device));
}

StaticStep::~StaticStep() = default;

void StaticStep::work() {
  // Backward writes fresh gradients: under capture, into the graph's memory, where every replay
  // rewrites them.
  for (auto& p : parameters_) p.mutable_grad().reset();
  const auto& t = t_;
  torch::Tensor bits;
  for (const auto& x : batches_)
    backward_share(model_->mean_bits(x) * factor_, t.grad_accum, bits);
  const double max_norm = t.grad_clip > 0 ? t.grad_clip : std::numeric_limits<double>::infinity();
  const auto norm = clip_gradients(parameters_, max_norm).to(bits.options()).reshape({1});
  torch::NoGradGuard no_grad;
  const auto skip = torch::isfinite(bits).logical_and(torch::isfinite(norm)).logical_not();
  const auto skip_flag = skip.to(torch::kFloat).reshape({});
  adamw_.update(skip_flag);
  if (!ema_.empty()) update_ema(ema_, *model_, t.ema_decay, skip_flag);
  numbers_ = torch::cat({bits, norm});
}

StaticStep::Numbers StaticStep::run(const std::vector<torch::Tensor>& batches,
                                    double lr,
                                    bool poisoned,
                                    std::optional<uint64_t> dropout_seed) {
  if (batches.size() != batches_.size())
    throw std::invalid_argument("StaticStep::run: " + std::to_string(batches.size()) +
                                " micro-batches, expected " + std::to_string(batches_.size()));
  for (size_t m = 0; m < batches.size(); ++m) batches_[m].copy_(batches[m]);
  adamw_.prepare(lr);
  if (capture_ && !graph_) {
    capture_ = false;  // one try
    // The warm-up runs (cuBLAS workspaces, the allocator's blocks) take a NaN loss: their
    // updates are skipped, so the capture leaves the weights and AdamW's state as they were.
    factor_.fill_(std::numeric_limits<double>::quiet_NaN());
    try {
      graph_ = std::make_unique<util::CapturedWork>([this] { work(); }, 2);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      capture_error_ = what.substr(0, what.find('\n'));
    }
  }
  factor_.fill_(poisoned ? std::numeric_limits<double>::quiet_NaN() : 1.0);
  if (dropout_seed) torch::manual_seed(*dropout_seed);
  if (graph_)
    graph_->replay();
  else
    work();
  const auto host = numbers_.cpu();  // the step's one read-back
  Numbers n;
  n.bits = host[0].item<double>();
  n.grad_norm = host[1].item<double>();
  n.updated = std::isfinite(n.bits) && std::isfinite(n.grad_norm);
  if (n.updated) adamw_.count_update();
  return n;
}

}  // namespace combiner::train
