#include "tools/decode_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attention/attention.h"
#include "attention/static_decode.h"
#include "tools/kernel_check.h"

namespace combiner::tools {

namespace {

using attention::StaticDecodeLayer;

// Every position's output [B, H, L, Dv] of one static decode layer on `path`.
torch::Tensor decode_all(const attention::AttentionImpl& module,
                         const attention::AttentionOptions& options,
                         const torch::Tensor& q,
                         const torch::Tensor& k,
                         const torch::Tensor& v,
                         StaticDecodeLayer::Path path,
                         bool bfloat16_cache) {
  const int64_t L = q.size(2);
  attention::StaticDecodeInputs inputs(options, L, q.device());
  StaticDecodeLayer layer(module.span_summary(), {path, bfloat16_cache});
  std::vector<torch::Tensor> outputs;
  for (int64_t i = 0; i < L; ++i) {
    layer.summarize(inputs.prepare(i));
    outputs.push_back(layer.step(q.select(2, i), k.select(2, i), v.select(2, i), inputs));
  }
  return torch::stack(outputs, 2);
}

}  // namespace

std::vector<DecodeCheckCase> decode_check_cases(bool large) {
  std::vector<DecodeCheckCase> cases;
  for (const auto& variant : attention::variant_names()) {
    const bool rows = attention::uses_row_len(variant);
    for (const auto& abstraction : attention::abstraction_names()) {
      const bool first = abstraction == attention::abstraction_names().front();
      if (!first && variant != "combiner-axial-vertical") continue;
      // A block or row of one image row (4 x 4 x 3), and a layout across rows: for the fixed
      // family a short last block.
      cases.push_back({variant, abstraction, 48, 12});
      cases.push_back({variant, abstraction, rows ? 60 : 50, rows ? 5 : 8});
      if (first) cases.push_back({variant, abstraction, 48, 12, 32, 2, 2, true});
    }
  }
  if (large)
    for (const std::string variant : {"combiner-axial-vertical",
                                      "combiner-axial-horizontal",
                                      "combiner-axial-rowmajor",
                                      "combiner-mixture",
                                      "full"})
      cases.push_back({variant, "max", 3072, 96, 128, 2, 2});
  if (large) cases.push_back({"combiner-axial-vertical", "max", 3072, 96, 128, 2, 2, true});
  return cases;
}

DecodeCheckResult run_decode_check(const DecodeCheckCase& c, const std::string& device) {
  DecodeCheckResult r;
  // float32 sums of up to L terms in other orders: 1e-5 at L 48, growing as sqrt(L) (8e-5 at
  // L 3072, where `full` sums 3072 terms and the CPU model's sequential sums err by 7e-6).
  r.tol = 1e-5 * std::sqrt(std::max(1.0, double(c.length) / 48));
  try {
    const torch::Device dev(device);
    const attention::AttentionOptions options{c.variant, c.layout, c.layout, c.abstraction};
    torch::manual_seed(uint64_t(c.length * 31 + c.layout));  // the DeepSets maps, the inputs
    auto module = attention::make_attention(options, c.length, c.dim);
    const auto shape = std::vector<int64_t>{c.batch, c.heads, c.length, c.dim};
    // Queries x 3: peaked weights, so a misplaced term shows.
    const auto q = torch::randn(shape) * 3, k = torch::randn(shape), v = torch::randn(shape);
    torch::NoGradGuard no_grad;

    module->to(dev);
    const auto run = [&](StaticDecodeLayer::Path path) {
      return decode_all(*module, options, q.to(dev), k.to(dev), v.to(dev), path, c.bfloat16_cache);
    };
    const auto fused = run(StaticDecodeLayer::Path::kFused);
    r.composed = attention::check_error(fused, run(StaticDecodeLayer::Path::kComposed));

    module->to(torch::kCPU, torch::kDouble);
    module->set_path(attention::AttentionImpl::Path::kComposed);
    const auto in_double = [&](const torch::Tensor& x) {
      return (c.bfloat16_cache ? x.to(torch::kBFloat16) : x).to(torch::kDouble);
    };
    const auto expected = module->forward(in_double(q), in_double(k), in_double(v));
    r.reference = attention::check_error(fused, expected);
    r.pass = std::max(r.composed, r.reference) <= r.tol;
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = e.what();
  }
  return r;
}

std::string decode_check_header() {
  char line[160];
  std::snprintf(line,
                sizeof line,
                "%-26s %-14s %5s %5s %4s %-8s %9s %9s %9s  %s",
                "decode step",
                "abstraction",
                "L",
                "s/W",
                "D",
                "cache",
                "composed",
                "reference",
                "tol",
                "result");
  return line;
}

std::string decode_check_line(const DecodeCheckCase& c, const DecodeCheckResult& r) {
  char line[256];
  std::snprintf(line,
                sizeof line,
                "%-26s %-14s %5lld %5lld %4lld %-8s %9.2e %9.2e %9.1e  %s",
                c.variant.c_str(),
                c.abstraction.c_str(),
                (long long)c.length,
                (long long)c.layout,
                (long long)c.dim,
                c.bfloat16_cache ? "bfloat16" : "float32",
                r.composed,
                r.reference,
                r.tol,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::tools
