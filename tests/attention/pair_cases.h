// Two passes in one launch (fused/kernel.h ForwardPair, BackwardPair, pairable): vertical's
// column pass with its local pass, rowmajor's and horizontal's row pass with their (prefix) local
// pass, forward and backward. The fused call with the pairs launched as they are, against the
// same call with each pair's passes launched one after the other (a HostKernels table whose
// forward_pair and backward_pair do that): the output and q's, k's and v's gradients to the bit,
// and one pair launched each way. Shared by tests/attention (the CPU model) and tests/emulated
// (the CUDA source). The same for a backward's dk/dv walk and dq in one launch
// (check_interleaved).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/function.h"
#include "attention/fused/fused.h"
#include "attention/fused/launch.h"
#include "attention/summary.h"

namespace combiner::attention::pair_cases {

enum class Variant { kVertical, kRowmajor, kHorizontal, kFixed };

struct Case {
  Variant variant;
  int64_t L, W, D;
  torch::ScalarType dtype;
  bool backward_pair = true;  // false: segments longer than a tile pair in the forward alone
};

inline std::string name(const Case& c) {
  const char* v = c.variant == Variant::kVertical     ? "vertical"
                  : c.variant == Variant::kRowmajor   ? "rowmajor"
                  : c.variant == Variant::kHorizontal ? "horizontal"
                                                      : "fixed";
  return std::string(v) + " L " + std::to_string(c.L) + " W " + std::to_string(c.W) + " D " +
         std::to_string(c.D) + " " + c10::toString(c.dtype);
}

struct Run {
  std::vector<torch::Tensor> out;             // o, dq, dk, dv
  int forward_pairs = 0, backward_pairs = 0;  // launches of two passes
  int interleaved = 0;  // backward calls whose dk/dv walk and dq share a launch
};

// The case's fused call and its backward, with `kernels` installed for host tensors.
inline Run run(const Case& c, const fused_launch::HostKernels* kernels) {
  torch::manual_seed(c.L + c.W + c.D);
  const auto q = torch::randn({1, 2, c.L, c.D}).to(c.dtype).requires_grad_();
  const auto k = torch::randn({1, 2, c.L, c.D}).to(c.dtype).requires_grad_();
  const auto v = torch::randn({1, 2, c.L, c.D}).to(c.dtype).requires_grad_();
  const auto d_o = torch::randn({1, 2, c.L, c.D}).to(c.dtype);
  torch::nn::Module owner;
  const SpanSummary summary(owner, "max", c.D, true);
  const auto* before = fused_launch::set_host_kernels(kernels);
  Run r;
  {
    fused_launch::LaunchTimes timer;
    const auto o =
        c.variant == Variant::kVertical     ? fused_combiner_vertical(q, k, v, summary, c.W)
        : c.variant == Variant::kRowmajor   ? fused_combiner_rowmajor(q, k, v, summary, c.W)
        : c.variant == Variant::kHorizontal ? fused_combiner_horizontal(q, k, v, summary, c.W)
                                            : fused_combiner_fixed(q, k, v, summary, c.W);
    const auto g = torch::autograd::grad({o}, {q, k, v}, {d_o});
    r.out = {o, g[0], g[1], g[2]};
    for (const auto& t : timer.times()) {
      r.forward_pairs += t.what.rfind("forward (two passes", 0) == 0;
      r.backward_pairs += t.what.rfind("backward (two passes", 0) == 0;
      r.interleaved += t.what.rfind("backward (dk dv and dq in one launch", 0) == 0;
    }
  }
  fused_launch::set_host_kernels(before);
  return r;
}

// `paired`: the kernels as they are; `split`: the same, each pair's passes launched in turn.
// Returns what failed ("" if nothing).
inline std::string check(const Case& c,
                         const fused_launch::HostKernels* paired,
                         const fused_launch::HostKernels* split) {
  const auto a = run(c, paired), b = run(c, split);
  std::string failed;
  const char* names[] = {"o", "dq", "dk", "dv"};
  for (size_t i = 0; i < a.out.size(); ++i)
    if (!torch::equal(a.out[i], b.out[i])) failed += std::string(" ") + names[i] + ";";
  if (a.forward_pairs != 1)
    failed += " " + std::to_string(a.forward_pairs) + " forward pair launches, not 1;";
  // (None where the one-CTA-per-segment kernel is not built: kernel_plan.h segment_backward_built.)
  const int backward =
      int(c.backward_pair && fused::segment_backward_built(fused_glue::kernel_dtype(c.dtype), c.D));
  if (a.backward_pairs != backward)
    failed += " " + std::to_string(a.backward_pairs) + " backward pair launches, not " +
              std::to_string(backward) + ";";
  if (a.out[2].abs().sum().item<double>() == 0) failed += " dk all zero;";
  return failed;
}

// The dk/dv walk and dq of a backward in one launch (kernel_plan.h interleaved_backward): `as_is`,
// the kernels as they are, against `split`, the same with each backward's walk and dq in two
// launches (Backward::interleave cleared). The output and q's, k's and v's gradients to the bit,
// and at least one backward in one launch. Returns what failed ("" if nothing).
// compare_interleaved takes two runs already made (the emulated test counts their launches);
// check_interleaved makes them.
inline std::string compare_interleaved(const Run& a, const Run& b) {
  std::string failed;
  const char* names[] = {"o", "dq", "dk", "dv"};
  for (size_t i = 0; i < a.out.size(); ++i)
    if (!torch::equal(a.out[i], b.out[i])) failed += std::string(" ") + names[i] + ";";
  if (a.interleaved < 1) failed += " no backward ran its walk and dq in one launch;";
  if (a.out[1].abs().sum().item<double>() == 0) failed += " dq all zero;";
  return failed;
}
inline std::string check_interleaved(const Case& c,
                                     const fused_launch::HostKernels* as_is,
                                     const fused_launch::HostKernels* split) {
  return compare_interleaved(run(c, as_is), run(c, split));
}

}  // namespace combiner::attention::pair_cases
