#include "tools/loss_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "ops/cross_entropy.h"
#include "tools/kernel_check.h"

namespace combiner::tools {

std::vector<LossCheckCase> loss_check_cases(bool large) {
  std::vector<LossCheckCase> cases;
  std::vector<int64_t> rows = {1, 1000};
  if (large) rows.push_back(32 * 3072);
  for (const auto* dtype : {"float32", "bfloat16"})
    for (const bool mean : {true, false})
      for (const int64_t vocab : {256, 37, 1})
        for (const int64_t r : rows)
          if (r <= 1000 || vocab == 256) cases.push_back({r, vocab, dtype, mean});
  return cases;
}

LossCheckResult run_loss_check(const LossCheckCase& c, const std::string& device) {
  LossCheckResult r;
  const bool bf16 = c.dtype == "bfloat16";
  // Bits: float32 exponentials and logarithms of inputs held exactly. The gradient: rounded once
  // to the logits' dtype in bfloat16 (2^-9 of its largest), float32's exp elsewhere.
  r.tol = bf16 ? 1e-2 : 1e-5;
  try {
    const torch::Device dev(device);
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat;
    torch::manual_seed(uint64_t(c.rows * 31 + c.vocab * 7 + (c.mean ? 1 : 0)));
    // Logits of a trained head's spread, and a few rows far from zero (the max's subtraction).
    auto logits = torch::randn({c.rows, c.vocab}, f64) * 3.0;
    logits.narrow(0, 0, std::min<int64_t>(c.rows, 3)).add_(80.0);
    logits = logits.to(dtype);
    const auto targets = c.vocab > 0 ? torch::randint(0, c.vocab, {c.rows}, torch::kByte)
                                     : torch::zeros({c.rows}, torch::kByte);
    const auto up = c.mean ? torch::full({}, double(c.rows), f64) : torch::randn({c.rows}, f64);

    auto zd = logits.to(dev).detach().requires_grad_();
    const auto bits = ops::cross_entropy_bits(zd, targets.to(dev), c.mean);
    bits.backward(up.to(torch::kFloat).to(dev));

    auto zr = logits.detach().to(torch::kDouble).requires_grad_();
    auto br = -torch::log_softmax(zr, -1).gather(-1, targets.to(torch::kLong).unsqueeze(-1)) /
              std::log(2.0);
    br = c.mean ? br.mean() : br.squeeze(-1);
    br.backward(up);

    r.bits = attention::check_error(bits, br);
    r.dlogits = attention::check_error(zd.grad(), zr.grad());
    const bool dtypes = bits.scalar_type() == torch::kFloat && zd.grad().scalar_type() == dtype;
    r.pass = std::max(r.bits, r.dlogits) <= r.tol && dtypes;
    if (!dtypes) r.detail = "bits not float32 or the gradient not in the logits' dtype";
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = e.what();
  }
  return r;
}

std::string loss_check_header() {
  char line[160];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6s %5s %9s %9s %9s  %s",
                "loss",
                "dtype",
                "rows",
                "vocab",
                "bits",
                "dlogits",
                "tol",
                "result");
  return line;
}

std::string loss_check_line(const LossCheckCase& c, const LossCheckResult& r) {
  char line[256];
  std::snprintf(line,
                sizeof line,
                "%-10s %-8s %6lld %5lld %9.2e %9.2e %9.1e  %s",
                c.mean ? "mean" : "per row",
                c.dtype.c_str(),
                (long long)c.rows,
                (long long)c.vocab,
                r.bits,
                r.dlogits,
                r.tol,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::tools
