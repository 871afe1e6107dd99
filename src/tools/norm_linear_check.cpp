#include "tools/norm_linear_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "ops/norm_linear.h"
#include "tools/kernel_check.h"

namespace combiner::tools {

std::vector<NormLinearCheckCase> norm_linear_check_cases(bool large) {
  std::vector<NormLinearCheckCase> cases;
  for (const int64_t width : {32, 96, 256, 1024})
    for (const int64_t rows : {1, 17, 64}) {
      cases.push_back({rows, width, 3 * width, true, false});     // the qkv projection
      cases.push_back({rows, width, 2 * width + 5, true, true});  // an MLP's, a partial block
    }
  cases.push_back({5, 64, 1, false, false});  // the first block's: no residual; one output
  cases.push_back({5, 64, 70, false, true});
  if (large) cases.push_back({200, 512, 2048, true, true});  // row blocks past a grid's first few
  return cases;
}

NormLinearCheckResult run_norm_linear_check(const NormLinearCheckCase& c,
                                            const std::string& device) {
  NormLinearCheckResult r;
  // float32 dot products of `width` terms against float64's: 1e-5 covers width 1024 with room.
  r.tol = 1e-5;
  try {
    const torch::Device dev(device);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    torch::manual_seed(uint64_t(c.rows * 131 + c.width * 7 + c.out));
    // float32 values, held in float64 for the reference
    auto make = [&](std::vector<int64_t> shape, double scale, double shift) {
      return (torch::randn(shape, f64) * scale + shift).to(torch::kFloat).to(torch::kDouble);
    };
    const auto x = make({c.rows, c.width}, 2.5, 1.0), res = make({c.rows, c.width}, 1.0, 0.0);
    const auto gamma = make({c.width}, 0.5, 1.0), beta = make({c.width}, 0.1, 0.0);
    const auto w = make({c.out, c.width}, 1.0 / std::sqrt(double(c.width)), 0.0);
    const auto b = make({c.out}, 0.1, 0.0);
    auto on = [&](const torch::Tensor& t) { return t.to(torch::kFloat).to(dev); };

    torch::NoGradGuard no_grad;
    const auto [sum, y] = ops::norm_linear(on(x),
                                           c.residual ? on(res) : torch::Tensor(),
                                           on(gamma),
                                           on(beta),
                                           1e-5,
                                           on(w),
                                           on(b),
                                           c.gelu);

    const auto sum_ref = c.residual ? x + res : x;
    auto y_ref = torch::linear(torch::layer_norm(sum_ref, {c.width}, gamma, beta, 1e-5), w, b);
    if (c.gelu) y_ref = torch::gelu(y_ref);
    r.sum = attention::check_error(sum, sum_ref);
    r.y = attention::check_error(y, y_ref);
    r.pass = std::max(r.sum, r.y) <= r.tol;
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = e.what();
  }
  return r;
}

std::string norm_linear_check_header() {
  char line[160];
  std::snprintf(line,
                sizeof line,
                "%-16s %6s %6s %6s %9s %9s %9s  %s",
                "norm + linear",
                "rows",
                "W",
                "out",
                "sum",
                "y",
                "tol",
                "result");
  return line;
}

std::string norm_linear_check_line(const NormLinearCheckCase& c, const NormLinearCheckResult& r) {
  char line[256];
  const std::string what = std::string(c.residual ? "+ residual" : "") +
                           (c.gelu ? (c.residual ? ", gelu" : "gelu") : "");
  std::snprintf(line,
                sizeof line,
                "%-16s %6lld %6lld %6lld %9.2e %9.2e %9.1e  %s",
                what.c_str(),
                (long long)c.rows,
                (long long)c.width,
                (long long)c.out,
                r.sum,
                r.y,
                r.tol,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::tools
