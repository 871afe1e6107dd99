// The fused launches' traffic model (attention/fused/traffic.h) against the kernels' own source:
// what the emulated kernels copy into their tiles by cp.async, in bytes, is what the model says
// their CTAs load, over a whole forward and backward of every fused variant, at layouts whose
// segments are packed two or more to a tile (W 8 and 16), one to a tile (48: fixed's local pass
// making its keys' maxes and its queries, horizontal's passes over 47 columns a row), split into
// two query tiles (W 96: rowmajor's row pass and local pass, at D 64 two walks in a pair of
// launches) or read summaries by prefix (combiner-fixed), in both dtypes and at D 64 and 128.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "emulated/emulated.h"
#include "simt/emulator.h"

namespace combiner {
namespace {

struct TrafficCase {
  std::string variant;
  int64_t length, layout, dim;
  torch::ScalarType dtype;
};

TEST(SimtTraffic, TheKernelsLoadWhatTheModelCounts) {
  const emulated::EmulatedKernels emulation;
  const std::vector<TrafficCase> cases = {
      {"combiner-fixed", 64, 8, 64, torch::kBFloat16},
      {"combiner-fixed", 288, 96, 64, torch::kFloat},
      {"combiner-fixed", 240, 48, 64, torch::kBFloat16},
      {"combiner-axial-rowmajor", 64, 8, 64, torch::kBFloat16},
      {"combiner-axial-rowmajor", 288, 96, 128, torch::kBFloat16},
      {"combiner-axial-rowmajor", 288, 96, 64, torch::kBFloat16},  // two walks paired
      {"combiner-axial-vertical", 64, 8, 64, torch::kFloat},
      {"combiner-axial-vertical", 256, 16, 128, torch::kBFloat16},
      {"combiner-axial-vertical", 288, 96, 64, torch::kBFloat16},
      {"combiner-axial-horizontal", 64, 8, 64, torch::kBFloat16},
      {"combiner-axial-horizontal", 288, 96, 64, torch::kFloat},
      {"combiner-axial-horizontal", 240, 48, 32, torch::kBFloat16},
  };
  for (const auto& c : cases) {
    const std::string name = c.variant + " L " + std::to_string(c.length) + " layout " +
                             std::to_string(c.layout) + " D " + std::to_string(c.dim) +
                             (c.dtype == torch::kBFloat16 ? " bfloat16" : " float32");
    auto m = attention::make_attention({c.variant, c.layout, c.layout, "max"}, c.length, c.dim);
    m->set_path(attention::AttentionImpl::Path::kFused);
    torch::manual_seed(c.length + c.dim);
    const auto options = torch::TensorOptions().dtype(c.dtype);
    auto q = torch::randn({1, 2, c.length, c.dim}, options).requires_grad_();
    auto k = torch::randn({1, 2, c.length, c.dim}, options).requires_grad_();
    auto v = torch::randn({1, 2, c.length, c.dim}, options).requires_grad_();
    std::vector<attention::fused_launch::LaunchTime> times;
    const int64_t launches = simt::launches(), copied = simt::async_copied_bytes();
    {
      attention::fused_launch::LaunchTimes timer;
      m->forward(q, k, v).sum().backward();
      times = timer.times();
    }
    EXPECT_GT(simt::launches(), launches) << name << ": no kernel was emulated";
    double loaded = 0;
    for (const auto& t : times) loaded += t.bytes.loaded;
    EXPECT_EQ(double(simt::async_copied_bytes() - copied), loaded) << name;
  }
}

}  // namespace
}  // namespace combiner
