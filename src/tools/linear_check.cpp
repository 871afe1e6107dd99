#include "tools/linear_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "ops/bias_grad_kernel.h"
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

namespace {

// dy * GELU'(pre), each element as the bias-gradient kernels make it (ops::gelu_grad in float32,
// rounded once to dy's dtype): CPU tensors of one dtype.
torch::Tensor gelu_backward_as_kernels(const torch::Tensor& dy, const torch::Tensor& pre) {
  const auto d = dy.to(torch::kFloat).contiguous(), p = pre.to(torch::kFloat).contiguous();
  auto out = torch::empty_like(d);
  const float *dp = d.data_ptr<float>(), *pp = p.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < d.numel(); ++i) o[i] = dp[i] * ops::gelu_grad(pp[i]);
  return out.to(dy.scalar_type());
}

}  // namespace

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
    // dx is LibTorch's own mm of d_pre (the op's contract), and dweight d_pre's float32 sums.
    // Debian's LibTorch 1.13 multiplies bfloat16 on a CPU without AVX-512 in bfloat16 sums
    // (errors to 0.5 of the largest element at 70,001 rows), which says nothing of the kernels:
    // there both are held to d_pre as the kernels' formula makes it from the op's own
    // pre-activation, dx to that mm, dweight to float64's.
    torch::Tensor dx_ref = xr.grad(), dw_ref = wr.grad();
    if (bf16 && !dev.is_cuda()) {
      const auto d_pre =
          c.gelu ? gelu_backward_as_kernels(dy, at::addmm(b.to(dtype), x, w.to(dtype).t())) : dy;
      dx_ref = d_pre.mm(w.to(dtype));
      dw_ref = d_pre.to(torch::kDouble).t().mm(x.to(torch::kDouble));
    }

    r.y = attention::check_error(y, yr);
    r.dx = attention::check_error(xd.grad(), dx_ref);
    r.dweight = attention::check_error(wd.grad(), dw_ref);
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
