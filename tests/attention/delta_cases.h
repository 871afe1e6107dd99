// The backward's deltas made inside the passes rather than by the delta kernel, held to the delta
// kernel run on the same rows: u's delta in the epilogue that stores u's gradient
// (fused/kernel_pass.h Backward::summary_delta; vertical's row pass, u its spans' values by
// segment, or horizontal's suffix pass, u its source A), and o's delta made by the first pass as
// its query tiles land (Backward::made_delta; vertical's row pass and horizontal's column pass,
// whose second source's walk reads it back, or a pass of one source). Each pass's backward runs
// with and without it. Shared by tests/attention (the CPU model) and tests/emulated (the CUDA
// source). Then a forward making o's delta by CTAs of its own (Forward::delta).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/function.h"
#include "attention/fused/fused.h"
#include "attention/fused/kernel.h"

namespace combiner::attention::delta_cases {

struct Case {
  bool horizontal;
  int64_t L, W, D;
  torch::ScalarType dtype;
  bool spans = false;  // o's delta made by the pass that reads the spans by segment
  bool mean = false;   // o a mean of two calls': o's delta made from another call's (other_delta)
};

inline std::string name(const Case& c) {
  return std::string(c.horizontal ? "horizontal" : "vertical") + " L " + std::to_string(c.L) +
         " W " + std::to_string(c.W) + " D " + std::to_string(c.D) + " " + c10::toString(c.dtype) +
         (c.spans ? ", the spans' pass" : "") + (c.mean ? ", o a mean" : "");
}

struct Kernels {
  void (*forward)(const fused::Forward&);
  void (*backward)(const fused::Backward&);
  void (*delta)(const fused::Delta&);
};

struct Result {
  std::vector<torch::Tensor> without, with;  // dq, dk, dv, dks, du
  torch::Tensor folded;                      // the pass's delta (NaN where not written)
  torch::Tensor kernel;                      // the delta kernel's over the same rows
  int64_t rows = 0;                          // the rows the pass makes delta for (each once)
};

// One pass of the case's variant over random q, k, v, ks, u, with o and lse from its own forward:
// its backward without and with a delta of its own (`made`: o's, Backward::made_delta; else u's).
class PassRun {
 public:
  PassRun(const Case& c, const Kernels& kernels, bool made)
      : c_(c), kernels_(kernels), made_(made) {
    const auto passes =
        c.horizontal ? horizontal_joint_passes(c.L, c.W) : vertical_joint_passes(c.L, c.W);
    for (const auto& p : passes) {
      const bool plain = !p.summaries && !p.a_from_summaries;
      const bool reads_u = c.horizontal ? p.a_from_summaries : p.summaries && p.by_segment;
      const bool by_segment = p.summaries && p.by_segment;
      if (made ? (c.spans ? by_segment : plain) : reads_u) fp_ = p;
    }
    of_a_ = c.horizontal && !made;
    const fused::Geometry u_rows = of_a_ ? fp_.value : fp_.summary_value;
    rows_ = made ? c.L : u_rows.limit;
    torch::manual_seed(c.L + c.D);
    q_ = randn(c.L), k_ = randn(c.L), v_ = randn(c.L), ks_ = randn(rows_), u_ = randn(rows_);
    d_o_ = randn(c.L);
    acc_ = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
    pass_ = fused_glue::make_pass(fp_, q_, k_, v_, ks_, u_, 1.0 / std::sqrt(double(c.D)));
    fused::Forward f;
    f.pass = pass_;
    o_ = torch::zeros_like(q_);
    lse_ = torch::full({1, 2, c.L}, -INFINITY, acc_);
    f.o = o_.data_ptr();
    for (int d = 0; d < 3; ++d) f.o_stride[d] = o_.stride(d);
    f.lse = lse_.data_ptr();
    kernels.forward(f);
    if (c.mean) other_ = torch::randn({1, 2, c.L}, acc_);
    delta_ = delta_of(o_, d_o_, other_);
    if (made) {
      rows_read_ = c.L;
    } else {
      for (int64_t s = 0; s < u_rows.segments; ++s) rows_read_ += fused::valid_count(u_rows, s);
    }
  }

  const fused::Pass& pass() const { return pass_; }

  Result run() {
    Result r;
    for (const bool fold : {false, true}) {
      std::vector<torch::Tensor> g = {torch::zeros_like(q_),
                                      of_a_ ? torch::zeros_like(ks_) : torch::zeros_like(k_),
                                      of_a_ ? torch::zeros_like(u_) : torch::zeros_like(v_),
                                      torch::zeros_like(ks_),
                                      torch::zeros_like(u_)};
      fused::Backward bw;
      bw.pass = pass_;
      bw.d_o = fused_glue::operand(d_o_);
      bw.lse = lse_.data_ptr();
      bw.delta = delta_.data_ptr();
      bw.dq = fused_glue::grad_out(g[0], fused::GradOut::kStore);
      bw.dk = fused_glue::grad_out(g[1], fused::GradOut::kStore);
      bw.dv = fused_glue::grad_out(g[2], fused::GradOut::kStore);
      if (pass_.summaries) {
        bw.dks = fused_glue::grad_out(g[3], fused::GradOut::kStore);
        bw.du = fused_glue::grad_out(g[4], fused::GradOut::kStore);
      }
      if (fold) {
        r.folded = torch::full({1, 2, rows_}, NAN, acc_);
        if (made_) {
          bw.delta = bw.made_delta = r.folded.data_ptr();
          bw.o = fused_glue::operand(o_);
          if (other_.defined()) bw.other_delta = other_.data_ptr();
        } else {
          bw.summary_delta = r.folded.data_ptr();
          bw.summary_delta_rows = rows_;
          bw.summary_delta_of_a = of_a_;
        }
      }
      kernels_.backward(bw);
      (fold ? r.with : r.without) = g;
    }
    r.kernel = made_ ? delta_ : delta_of(u_, of_a_ ? r.with[2] : r.with[4]);
    r.rows = rows_read_;
    return r;
  }

  // The pass's backward for a d_o of `factor` x the drawn one: given so, with the delta of it
  // and grad_scale 1 (`in_pass` false), or given as drawn, with the delta of that and grad_scale
  // `factor` (Backward::grad_scale). Its gradients as `kind` writes them (kStore in the pass
  // dtype; kStoreAcc and kAtomic into Acc buffers of zeros), then the delta it makes (o's where
  // `made_`, else u's; kStore alone: u's is made from a gradient stored so) or an undefined tensor.
  std::vector<torch::Tensor> scaled(double factor, bool in_pass, fused::GradOut::Kind kind) {
    const auto d_o = in_pass ? d_o_ : (d_o_.to(acc_.dtype()) * factor).to(c_.dtype);
    const auto delta = delta_of(o_, d_o);
    const auto zeros = [&](const torch::Tensor& like) {
      return kind == fused::GradOut::kStore ? torch::zeros_like(like)
                                            : torch::zeros(like.sizes(), acc_);
    };
    std::vector<torch::Tensor> g = {zeros(q_),
                                    zeros(of_a_ ? ks_ : k_),
                                    zeros(of_a_ ? u_ : v_),
                                    zeros(ks_),
                                    zeros(u_),
                                    torch::Tensor()};
    fused::Backward bw;
    bw.pass = pass_;
    bw.d_o = fused_glue::operand(d_o);
    bw.grad_scale = in_pass ? factor : 1;
    bw.lse = lse_.data_ptr();
    bw.delta = delta.data_ptr();
    bw.dq = fused_glue::grad_out(g[0], kind);
    bw.dk = fused_glue::grad_out(g[1], kind);
    bw.dv = fused_glue::grad_out(g[2], kind);
    if (pass_.summaries) {
      bw.dks = fused_glue::grad_out(g[3], kind);
      bw.du = fused_glue::grad_out(g[4], kind);
    }
    if (kind == fused::GradOut::kStore) {
      g[5] = torch::full({1, 2, rows_}, NAN, acc_);
      if (made_) {
        bw.delta = bw.made_delta = g[5].data_ptr();
        bw.o = fused_glue::operand(o_);
      } else {
        bw.summary_delta = g[5].data_ptr();
        bw.summary_delta_rows = rows_;
        bw.summary_delta_of_a = of_a_;
      }
    }
    kernels_.backward(bw);
    return g;
  }

 private:
  torch::Tensor randn(int64_t n) const { return torch::randn({1, 2, n, c_.D}).to(c_.dtype); }
  torch::Tensor delta_of(const torch::Tensor& x,
                         const torch::Tensor& dx,
                         const torch::Tensor& other = {}) const {
    auto out = torch::full({1, 2, x.size(2)}, NAN, acc_);
    fused::Delta d;
    if (other.defined()) d.other_delta = other.data_ptr();
    d.batch = 1;
    d.heads = 2;
    d.rows = x.size(2);
    d.dim = c_.D;
    d.dtype = pass_.dtype;
    d.o = fused_glue::operand(x);
    d.d_o = fused_glue::operand(dx);
    d.delta = out.data_ptr();
    kernels_.delta(d);
    return out;
  }

  Case c_;
  Kernels kernels_;
  bool made_, of_a_ = false;
  FusedPass fp_;
  fused::Pass pass_;
  int64_t rows_ = 0, rows_read_ = 0;
  torch::TensorOptions acc_;
  torch::Tensor q_, k_, v_, ks_, u_, d_o_, o_, lse_, delta_, other_;
};

// The checks both test files make: the gradients as without the fold, each row written once and
// no other, the delta kernel's value to the bit. `walk`: o's made by a pass that is no one CTA per
// segment, in its dk/dv walk (kernel_plan.h walk_makes_delta), else by one that is. Returns what
// failed
// ("" if nothing).
inline std::string check(const Case& c, const Kernels& kernels, bool made, bool walk = false) {
  PassRun run(c, kernels, made);
  if (made && fused::walk_makes_delta(run.pass()) != walk)
    return walk ? " not a pass whose walk makes delta" : " a pass whose walk makes delta";
  const auto r = run.run();
  std::string failed;
  for (size_t i = 0; i < r.with.size(); ++i)
    if (!torch::equal(r.with[i], r.without[i])) failed += " gradient " + std::to_string(i) + ";";
  const auto written = r.folded.isnan().logical_not();
  if (written.sum().item<int64_t>() != 2 * r.rows)  // B x H = 2
    failed += " rows written " + std::to_string(written.sum().item<int64_t>()) + " of " +
              std::to_string(2 * r.rows) + ";";
  if (!torch::equal(r.folded.masked_select(written), r.kernel.masked_select(written)))
    failed += " not the delta kernel's;";
  if (r.folded.masked_select(written).abs().sum().item<double>() == 0) failed += " all zero;";
  return failed;
}

// A pass's gradients scaled where it writes them (fused/kernel_pass.h Backward::grad_scale) are
// those of d_o scaled first, to the bit, for a power of two; the delta the pass makes is then u's
// of the gradient as stored (the same bits), or o's of d_o as given (made_delta: 1 / factor times
// the other's, to the bit). Returns what failed ("" if nothing).
inline std::string check_grad_scale(const Case& c,
                                    const Kernels& kernels,
                                    bool made,
                                    fused::GradOut::Kind kind,
                                    double factor = 0.5) {
  PassRun run(c, kernels, made);
  const auto first = run.scaled(factor, false, kind), in_pass = run.scaled(factor, true, kind);
  std::string failed;
  for (size_t i = 0; i < 5; ++i) {
    if (!torch::equal(in_pass[i], first[i])) failed += " gradient " + std::to_string(i) + ";";
    if (i == 0 && in_pass[i].abs().sum().item<double>() == 0) failed += " dq all zero;";
  }
  if (first[5].defined()) {
    const auto made_by_pass = made ? in_pass[5] * factor : in_pass[5];
    const auto same = torch::equal(made_by_pass.isnan(), first[5].isnan()) &&
                      torch::equal(made_by_pass.nan_to_num(0, 0, 0), first[5].nan_to_num(0, 0, 0));
    if (!same) failed += " the delta the pass makes;";
    if (first[5].isnan().all().item<bool>()) failed += " no delta made;";
  }
  return failed;
}

// A forward that makes the backward's delta by CTAs of its own (fused/kernel_pass.h Forward::delta;
// the local pass remade in backward): the pass's o and lse as without it, to the bit, and every
// row's delta the delta kernel's, to the bit. The pass: the joint one of `c`'s variant that reads
// no slot (vertical's column pass, horizontal's row pass); the delta: of L rows of other random o
// and d_o. Returns what failed ("" if nothing).
inline std::string check_forward_delta(const Case& c, const Kernels& kernels) {
  FusedPass fp;  // the variant's pass that reads no slot
  for (const auto& p :
       c.horizontal ? horizontal_joint_passes(c.L, c.W) : vertical_joint_passes(c.L, c.W))
    if (!p.summaries && !p.a_from_summaries) fp = p;
  torch::manual_seed(c.L + c.W + c.D);
  const auto draw = [&] { return torch::randn({1, 2, c.L, c.D}).to(c.dtype); };
  const auto q = draw(), k = draw(), v = draw(), o_call = draw(), d_o = draw();
  const auto acc = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
  const auto other = c.mean ? torch::randn({1, 2, c.L}, acc) : torch::Tensor();
  std::vector<torch::Tensor> o(2), lse(2);
  const auto delta = torch::full({1, 2, c.L}, NAN, acc), expected = delta.clone();
  for (const bool with : {false, true}) {
    fused::Forward f;
    f.pass = fused_glue::make_pass(fp, q, k, v, {}, {}, 1.0 / std::sqrt(double(c.D)));
    o[with] = torch::full({1, 2, fp.query.limit, c.D}, NAN).to(c.dtype);
    lse[with] = torch::full({1, 2, fp.query.limit}, NAN, acc);
    f.o = o[with].data_ptr();
    for (int d = 0; d < 3; ++d) f.o_stride[d] = o[with].stride(d);
    f.lse = lse[with].data_ptr();
    if (with) f.delta = fused_glue::delta_of(o_call, d_o, delta, other);
    kernels.forward(f);
  }
  kernels.delta(fused_glue::delta_of(o_call, d_o, expected, other));
  std::string failed;
  const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {  // NaN where unwritten
    return torch::equal(a.isnan(), b.isnan()) &&
           torch::equal(a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0));
  };
  if (!same(o[1], o[0]) || !same(lse[1], lse[0])) failed += " o or lse not as without it;";
  if (delta.isnan().any().item<bool>()) failed += " a row of delta not written;";
  if (!torch::equal(delta, expected)) failed += " not the delta kernel's;";
  return failed;
}

// The delta kernel where o is a mean of two calls' outputs (Delta::other_delta): 2 d_o . o less
// the other call's delta, to the bit, from its plain d_o . o. Returns what failed ("" if nothing).
inline std::string check_own_delta(const Case& c, const Kernels& kernels) {
  torch::manual_seed(c.L + c.D + 1);
  const auto o = torch::randn({1, 2, c.L, c.D}).to(c.dtype), d_o = torch::randn_like(o);
  const auto acc = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
  const auto other = torch::randn({1, 2, c.L}, acc);
  const auto plain = torch::full({1, 2, c.L}, NAN, acc), own = plain.clone();
  kernels.delta(fused_glue::delta_of(o, d_o, plain));
  kernels.delta(fused_glue::delta_of(o, d_o, own, other));
  return torch::equal(own, 2 * plain - other) ? "" : " not 2 d_o . o less the other's;";
}

// A pass storing the mean of its o and another call's (Forward::mean_with): the variant's joint
// pass that reads no slot stores its rows, then (`merge`) runs again merging into them; the last
// launch with mean_with and without. lse the same bits; o the mean of the pass's own o and the
// other, (o + other) / 2, to the bit in float32 and float64 (one rounding either way), within a
// bfloat16 rounding of it in bfloat16 (the mean is of the unrounded o). Vertical's column pass is
// strict: a column's first row has no term, and a merging pass stores the mean of what it held.
// Returns what failed ("" if nothing).
inline std::string check_mean_with(const Case& c, const Kernels& kernels, bool merge) {
  FusedPass fp;  // the variant's pass that reads no slot
  for (const auto& p :
       c.horizontal ? horizontal_joint_passes(c.L, c.W) : vertical_joint_passes(c.L, c.W))
    if (!p.summaries && !p.a_from_summaries) fp = p;
  torch::manual_seed(c.L + c.W + c.D + 2);
  const auto draw = [&] { return torch::randn({1, 2, c.L, c.D}).to(c.dtype); };
  const auto q = draw(), k = draw(), v = draw(), other = draw();
  const auto acc = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
  std::vector<torch::Tensor> o(2), lse(2);
  for (const bool mean : {false, true}) {
    o[mean] = torch::full({1, 2, c.L, c.D}, NAN).to(c.dtype);
    lse[mean] = torch::full({1, 2, c.L}, NAN, acc);
    for (const bool last : {false, true}) {
      if (!last && !merge) continue;
      fused::Forward f;
      f.pass = fused_glue::make_pass(fp, q, k, v, {}, {}, 1.0 / std::sqrt(double(c.D)));
      f.o = o[mean].data_ptr();
      for (int d = 0; d < 3; ++d) f.o_stride[d] = o[mean].stride(d);
      f.lse = lse[mean].data_ptr();
      f.merge = merge && last;
      if (last && mean) f.mean_with = other.data_ptr();
      kernels.forward(f);
    }
  }
  std::string failed;
  if (!torch::equal(lse[1], lse[0])) failed += " lse not the pass's own;";
  if (o[0].isnan().any().item<bool>()) failed += " a row of o not written;";
  const auto expected = (o[0].to(acc.dtype()) + other.to(acc.dtype())) * 0.5;
  if (c.dtype == torch::kBFloat16) {
    const double bound = std::ldexp(expected.abs().max().item<double>(), -7);
    if ((o[1].to(acc.dtype()) - expected).abs().max().item<double>() > bound)
      failed += " o not the mean to a bfloat16 rounding;";
  } else if (!torch::equal(o[1], expected)) {
    failed += " o not the mean to the bit;";
  }
  if (lse[0].isinf().sum().item<int64_t>() == 0 && merge && !c.horizontal)
    failed += " no row without a term;";
  return failed;
}

}  // namespace combiner::attention::delta_cases
