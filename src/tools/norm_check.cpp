#include "tools/norm_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "ops/layer_norm.h"
#include "tools/kernel_check.h"

namespace combiner::tools {

std::vector<NormCheckCase> norm_check_cases(bool large) {
  std::vector<NormCheckCase> cases;
  const std::vector<int64_t> widths = {32, 64, 96, 256, 512, 1024};
  std::vector<int64_t> rows = {1, 37, 1000};
  if (large) rows.push_back(49152);  // the 128-layer preset's batch of 16 x 3072 positions
  for (const auto* dtype : {"float32", "bfloat16"})
    for (const int64_t w : widths)
      for (const int64_t r : rows)
        if (r * w <= int64_t(49152) * 256) cases.push_back({r, w, dtype});
  for (const auto* dtype : {"float32", "bfloat16"})
    for (const int64_t w : widths) cases.push_back({1000, w, dtype, true});
  return cases;
}

NormCheckResult run_norm_check(const NormCheckCase& c, const std::string& device) {
  NormCheckResult r;
  const bool bf16 = c.out_dtype == "bfloat16";
  // y is rounded once to bf16 (half an ulp: 2^-9 of |y|, |y| up to ~10 here, against which the
  // error is scaled); gradients see the same dy values as the reference, so only float32 sums
  // separate them.
  r.tol_y = bf16 ? 1e-2 : 1e-4;
  r.tol_grad = 1e-4;
  try {
    const torch::Device dev(device);
    const auto options = torch::TensorOptions().dtype(torch::kDouble);
    torch::manual_seed(uint64_t(c.rows * 131 + c.width));
    const auto x64 = torch::randn({c.rows, c.width}, options) * 2.5 + 3.0;
    const auto w64 = torch::randn({c.width}, options) * 0.5 + 1.0;
    const auto b64 = torch::randn({c.width}, options) * 0.1;
    const auto out = bf16 ? torch::kBFloat16 : torch::kFloat;
    // dy as the fused op receives it (in y's dtype), the reference the same values.
    const auto dy = torch::randn({c.rows, c.width}, options).to(out);

    // With `add`: a residual in y's dtype (a matmul's output) and h's gradient from its other
    // reader (the residual path), float32.
    const auto res64 = torch::randn({c.rows, c.width}, options).to(out).to(torch::kDouble);
    const auto dh = torch::randn({c.rows, c.width}, options).to(torch::kFloat);

    auto x = x64.to(torch::kFloat).to(dev).requires_grad_();
    auto w = w64.to(torch::kFloat).to(dev).requires_grad_();
    auto b = b64.to(torch::kFloat).to(dev).requires_grad_();
    auto res = res64.to(out).to(dev).requires_grad_();
    torch::Tensor y, h;
    if (c.add) {
      std::tie(h, y) = ops::fused_add_layer_norm(x, res, w, b, 1e-5, out);
      torch::autograd::backward({h, y}, {dh.to(dev), dy.to(dev)});
    } else {
      y = ops::fused_layer_norm(x, w, b, 1e-5, out);
      y.backward(dy.to(dev));
    }

    // The reference: float64 from the same float32 (and residual) inputs.
    auto xr = x64.to(torch::kFloat).to(torch::kDouble).requires_grad_();
    auto wr = w64.to(torch::kFloat).to(torch::kDouble).requires_grad_();
    auto br = b64.to(torch::kFloat).to(torch::kDouble).requires_grad_();
    auto resr = res64.clone().requires_grad_();
    const auto hr = c.add ? xr + resr : xr;
    const auto yr = torch::layer_norm(hr, {c.width}, wr, br, 1e-5);
    if (c.add)
      torch::autograd::backward({hr, yr}, {dh.to(torch::kDouble), dy.to(torch::kDouble)});
    else
      yr.backward(dy.to(torch::kDouble));

    r.y = attention::check_error(y, yr);
    r.dx = attention::check_error(x.grad(), xr.grad());
    if (c.add) {
      r.y = std::max(r.y, attention::check_error(h, hr));
      r.d_residual = attention::check_error(res.grad(), resr.grad());
    }
    r.dweight = attention::check_error(w.grad(), wr.grad());
    r.dbias = attention::check_error(b.grad(), br.grad());
    r.pass = std::max(r.y, r.d_residual) <= r.tol_y &&
             std::max({r.dx, r.dweight, r.dbias}) <= r.tol_grad;
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = e.what();
  }
  return r;
}

std::string norm_check_header() {
  char line[160];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6s %6s %9s %9s %9s %9s %9s %9s %9s  %s",
                "layer norm",
                "y dtype",
                "rows",
                "W",
                "y",
                "dx",
                "dresidual",
                "dweight",
                "dbias",
                "tol:y",
                "tol:grad",
                "result");
  return line;
}

std::string norm_check_line(const NormCheckCase& c, const NormCheckResult& r) {
  char line[256];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6lld %6lld %9.2e %9.2e %9.2e %9.2e %9.2e %9.1e %9.1e  %s",
                c.add ? "+ residual" : "",
                c.out_dtype.c_str(),
                (long long)c.rows,
                (long long)c.width,
                r.y,
                r.dx,
                r.d_residual,
                r.dweight,
                r.dbias,
                r.tol_y,
                r.tol_grad,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::tools
