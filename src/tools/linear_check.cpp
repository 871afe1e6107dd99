#include "tools/linear_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "ops/linear.h"
#include "ops/weight_cast.h"
#include "tools/kernel_check.h"

namespace combiner::tools {

std::vector<LinearCheckCase> linear_check_cases(bool large) {
  std::vector<LinearCheckCase> cases;
  std::vector<int64_t> rows = {1, 37, 1000};
  if (large) {
    rows.push_back(49152);  // the 128-layer preset's 16 images of 3072 positions
    rows.push_back(70001);  // past 1,024 parts of 64 rows: some parts take more
  }
  for (const auto* dtype : {"float32", "bfloat16"})
    for (const bool gelu : {false, true})
      for (const int64_t out : {8, 264, 768, 1024})
        for (const int64_t r : rows)
          if (r < 49152 || out == 1024) cases.push_back({r, 64, out, dtype, gelu});
  return cases;
}

LinearCheckResult run_linear_check(const LinearCheckCase& c, const std::string& device) {
  LinearCheckResult r;
  const bool bf16 = c.dtype == "bfloat16";
  // bfloat16: the output, d_pre and dx are rounded once each (2^-9 of the largest, against which
  // the error is scaled; dweight's float32 sums start from that d_pre); float32: sums of up to
  // 70,001 terms.
  r.tol = bf16 ? 2e-2 : 1e-4;
  try {
    const torch::Device dev(device);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat;
    torch::manual_seed(uint64_t(c.rows * 131 + c.out * 7 + (c.gelu ? 1 : 0)));
    // float32 parameters, x and dy in the compute dtype; the reference takes the same values
    // rounded as the op rounds them.
    const auto x = torch::randn({c.rows, c.in}, f64).to(dtype);
    const auto w = (torch::randn({c.out, c.in}, f64) / std::sqrt(double(c.in))).to(torch::kFloat);
    const auto b = (torch::randn({c.out}, f64) * 0.5).to(torch::kFloat);
    const auto dy = torch::randn({c.rows, c.out}, f64).to(dtype);

    auto xd = x.to(dev).requires_grad_(), wd = w.to(dev).requires_grad_(),
         bd = b.to(dev).requires_grad_();
    // In bfloat16 the op reads the weight and bias from their copies, as the model's layers do
    // (ops::WeightCopies, one launch for both): the weight-cast kernel checked on each device.
    torch::Tensor weight_copy, bias_copy;
    std::unique_ptr<ops::WeightCopies> copies;
    if (bf16) {
      copies = std::make_unique<ops::WeightCopies>(std::vector<torch::Tensor>{wd, bd});
      copies->write();
      weight_copy = copies->copy(0);
      bias_copy = copies->copy(1);
    }
    const auto y = ops::fused_linear(xd, wd, bd, c.gelu, dtype, weight_copy, bias_copy);
    y.backward(dy.to(dev));

    auto as64 = [](const torch::Tensor& t, torch::ScalarType via) {
      return t.to(via).to(torch::kDouble).detach().requires_grad_();
    };
    auto xr = as64(x, dtype), wr = as64(w, dtype), br = as64(b, dtype);
    const auto pre = torch::linear(xr, wr, br);
    const auto yr = c.gelu ? torch::gelu(pre) : pre;
    yr.backward(dy.to(torch::kDouble));
    // Each product sums in float32 on every device (ops/gemm.h): float64's is the reference.
    r.y = attention::check_error(y, yr);
    r.dx = attention::check_error(xd.grad(), xr.grad());
    r.dweight = attention::check_error(wd.grad(), wr.grad());
    r.dbias = attention::check_error(bd.grad(), br.grad());
    r.pass = std::max({r.y, r.dx, r.dweight, r.dbias}) <= r.tol &&
             bd.grad().scalar_type() == torch::kFloat;
    if (bd.grad().scalar_type() != torch::kFloat) r.detail = "the bias's gradient is not float32";
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = e.what();
  }
  return r;
}

std::string linear_check_header() {
  char line[160];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6s %5s %5s %9s %9s %9s %9s %9s  %s",
                "linear",
                "dtype",
                "rows",
                "in",
                "out",
                "y",
                "dx",
                "dweight",
                "dbias",
                "tol",
                "result");
  return line;
}

std::string linear_check_line(const LinearCheckCase& c, const LinearCheckResult& r) {
  char line[256];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6lld %5lld %5lld %9.2e %9.2e %9.2e %9.2e %9.1e  %s",
                c.gelu ? "+ gelu" : "",
                c.dtype.c_str(),
                (long long)c.rows,
                (long long)c.in,
                (long long)c.out,
                r.y,
                r.dx,
                r.dweight,
                r.dbias,
                r.tol,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::tools
