#include "ops/weight_cast.h"

#include <atomic>
#include <stdexcept>

#include "ops/dispatch.h"
#include "ops/weight_cast_kernel.h"

namespace combiner::ops {

namespace {

std::atomic<int64_t> weight_cast_launched{0};

const Kernel<WeightCast> kWeightCast{&weight_cast_cpu,
                                     COMBINER_OPS_CUDA(weight_cast_cuda),
                                     &HostKernels::weight_cast,
                                     kWeightCastLaunches,
                                     "weight cast"};

}  // namespace

std::string weight_copies_unsupported(const std::vector<torch::Tensor>& sources) {
  if (sources.empty()) return "no tensors to copy";
  for (size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    if (!s.defined() || s.scalar_type() != torch::kFloat || !s.is_contiguous())
      return "tensor " + std::to_string(i) + " is not a contiguous float32 tensor";
    if (s.device() != sources[0].device())
      return "tensor " + std::to_string(i) + " is on " + s.device().str() + ", tensor 0 on " +
             sources[0].device().str();
  }
#ifndef COMBINER_WITH_CUDA_OPS
  if (sources[0].is_cuda()) return "this build has no CUDA kernels";
#endif
  return "";
}

WeightCopies::WeightCopies(const std::vector<torch::Tensor>& sources) {
  const auto why = weight_copies_unsupported(sources);
  if (!why.empty()) throw std::invalid_argument("weight copies: " + why);
  const int64_t n = int64_t(sources.size());
  auto table = torch::empty({3, n}, torch::kLong);
  auto* t = table.data_ptr<int64_t>();
  int64_t first = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& s = sources[size_t(i)];
    sources_.push_back({s.data_ptr(), s.sizes().vec()});
    t[i] = reinterpret_cast<int64_t>(s.data_ptr());
    t[n + i] = first;
    t[2 * n + i] = s.numel();
    first += (s.numel() + kCastVector - 1) / kCastVector * kCastVector;
  }
  const auto device = sources[0].device();
  table_ = table.to(device);
  buffer_ = torch::empty({first}, torch::dtype(torch::kBFloat16).device(device));
  for (int64_t i = 0; i < n; ++i)
    copies_.push_back(buffer_.narrow(0, t[n + i], t[2 * n + i]).view(sources_[size_t(i)].shape));
}

bool WeightCopies::covers(const std::vector<torch::Tensor>& sources) const {
  if (sources.size() != sources_.size()) return false;
  for (size_t i = 0; i < sources.size(); ++i)
    if (sources[i].data_ptr() != sources_[i].data || sources[i].sizes() != sources_[i].shape)
      return false;
  return true;
}

void WeightCopies::write() {
  WeightCast w;
  w.tensors = int64_t(sources_.size());
  w.groups = buffer_.numel() / kCastVector;
  w.table = table_.data_ptr<int64_t>();
  w.out = reinterpret_cast<uint16_t*>(buffer_.data_ptr());
  run_kernel(kWeightCast, buffer_, w, weight_cast_launched);
}

int64_t weight_cast_launches() {
  return weight_cast_launched.load();
}

}  // namespace combiner::ops
