// A local pass that makes its keys' segment maxes in its own CTAs and, where each segment is one
// key tile, takes their backward there (fused/kernel_pass.h Forward::key_pool, Backward::key_pool:
// rowmajor's row maxes, fixed's block maxes), held to the same pass without them followed by the
// segment max kernel each way: o, lse and the maxes, then dq, dk and dv, to the bit; with the
// maxes' gradient in slabs (SegmentMax::dy_slabs, as rowmajor's column pass writes it), also to the
// bit what the segment max kernel gives of their sum, slab after slab. Shared by tests/attention
// (the CPU model) and tests/emulated (the CUDA source).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/function.h"
#include "attention/fused/fused.h"
#include "attention/fused/kernel.h"
#include "attention/fused/pool_stage.h"

namespace combiner::attention::key_pool_cases {

struct Case {
  bool fixed;  // fixed's local pass (a pooled query a block), else rowmajor's (a row's queries)
  int64_t L, W, D;
  torch::ScalarType dtype;
  bool ties = false;  // k drawn from a few integers: columns with several equal maxes
  int64_t slabs = 1;  // the maxes' gradient in this many slabs
};

inline std::string name(const Case& c) {
  return std::string(c.fixed ? "fixed" : "rowmajor") + " L " + std::to_string(c.L) + " W " +
         std::to_string(c.W) + " D " + std::to_string(c.D) + " " + c10::toString(c.dtype) +
         (c.ties ? ", ties" : "") + (c.slabs > 1 ? ", " + std::to_string(c.slabs) + " slabs" : "");
}

struct Kernels {
  void (*forward)(const fused::Forward&);
  void (*backward)(const fused::Backward&);
  void (*segment_max)(const fused::SegmentMaxes&);
  void (*segment_max_backward)(const fused::SegmentMaxes&);
};

// The case's local pass over its segments (every row but the last is a span).
inline FusedPass local_pass(const Case& c) {
  const int64_t spans = (c.L + c.W - 1) / c.W - 1;
  FusedPass local;
  local.query = c.fixed ? fused::Geometry{spans, 1, 1, 1, spans}
                        : fused::Geometry{spans, c.W, c.W, 1, spans * c.W};
  local.key = local.value = {spans, c.W, c.W, 1, spans * c.W};
  local.mask = fused::Mask::kNone;
  return local;
}

// The same values, bit for bit, and NaN (unwritten) in the same places.
inline bool same(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::equal(a.isnan(), b.isnan()) &&
         torch::equal(a.nan_to_num(0, 0, 0), b.nan_to_num(0, 0, 0));
}

// "" where the pass with its key pool gives what the pass and the segment max kernel give.
inline std::string check(const Case& c, const Kernels& kernels) {
  const FusedPass local = local_pass(c);
  const int64_t spans = local.key.segments, rows = local.query.limit;
  torch::manual_seed(c.L + c.W + c.D);
  const auto draw = [&](int64_t n) {
    return (c.ties ? torch::randint(-2, 3, {1, 2, n, c.D}) : torch::randn({1, 2, n, c.D}))
        .to(c.dtype);
  };
  const auto q = draw(rows), k = draw(c.L), v = draw(c.L), d_o = draw(rows);
  const auto pass = fused_glue::make_pass(local, q, k, v, {}, {}, 1.0);
  if (!fused::key_pool_on_chip(pass, spans, c.W))
    return " the case's pass cannot make its key pool";
  // Segments of more than one key tile: the pass makes the maxes, the kernel takes them back.
  const bool takes_back = fused::key_pool_backward_on_chip(pass, spans, c.W);
  const auto acc = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
  // A fused call's float32 gradient, in slabs; and their sum, slab 0 first.
  const auto d_ks = torch::randn({1, 2, c.slabs * spans, c.D}, acc);
  const auto slab = [&](int64_t s) { return d_ks.view({1, 2, c.slabs, spans, c.D}).select(2, s); };
  auto d_ks_sum = slab(0).clone();
  for (int64_t s = 1; s < c.slabs; ++s) d_ks_sum = d_ks_sum + slab(s);
  const auto dk_before = draw(c.L), dv_before = draw(c.L);  // what earlier passes added
  const FusedPool pool = FusedPool::segment_max(false, spans, c.W);
  const double scale = 1.0 / std::sqrt(double(c.D));
  std::vector<torch::Tensor> o(2), lse(2), ks(2), dq(2), dk(2), dv(2);
  torch::Tensor dk_of_sum;  // the pass's, then the segment max kernel's backward of the slabs' sum
  for (const bool with : {false, true}) {
    fused::Forward f;
    f.pass = fused_glue::make_pass(local, q, k, v, {}, {}, scale);
    o[with] = torch::full({1, 2, rows, c.D}, NAN).to(c.dtype);
    lse[with] = torch::full({1, 2, rows}, NAN, acc);
    ks[with] = torch::full({1, 2, spans, c.D}, NAN).to(c.dtype);
    f.o = o[with].data_ptr();
    for (int d = 0; d < 3; ++d) f.o_stride[d] = o[with].stride(d);
    f.lse = lse[with].data_ptr();
    if (with) f.key_pool = fused_pools::on_chip_forward(pool, k, ks[with]);
    kernels.forward(f);
    if (!with) kernels.segment_max(fused::one_part(fused_pools::on_chip_forward(pool, k, ks[0])));

    const auto delta = (o[with].to(acc.dtype()) * d_o.to(acc.dtype())).sum(-1).contiguous();
    dq[with] = torch::full({1, 2, rows, c.D}, NAN).to(c.dtype);
    dk[with] = dk_before.clone();
    dv[with] = dv_before.clone();
    fused::Backward b;
    b.pass = f.pass;
    b.d_o = fused_glue::operand(d_o);
    b.lse = lse[with].data_ptr();
    b.delta = delta.data_ptr();
    b.dq = fused_glue::grad_out(dq[with], fused::GradOut::kStore);
    for (auto* out : {&b.dk, &b.dv}) {
      *out = fused_glue::grad_out(out == &b.dk ? dk[with] : dv[with], fused::GradOut::kStore);
      out->addend = out->data;  // added into in place, as after an earlier pass
      out->addend_in_storage = true;
    }
    const auto pool_backward = fused_pools::on_chip_backward(pool, k, d_ks, dk[with], c.slabs);
    if (with && takes_back) b.key_pool = pool_backward;
    kernels.backward(b);
    if (!with) {
      dk_of_sum = dk[0].clone();
      kernels.segment_max_backward(fused::one_part(
          fused_pools::on_chip_backward(pool, k, d_ks_sum.contiguous(), dk_of_sum)));
    }
    if (!with || !takes_back) kernels.segment_max_backward(fused::one_part(pool_backward));
  }
  std::string failed;
  if (!same(o[1], o[0]) || !same(lse[1], lse[0])) failed += " o or lse not as without it;";
  if (ks[1].isnan().any().item<bool>()) failed += " a max not written;";
  if (!same(ks[1], ks[0])) failed += " the maxes not the segment max kernel's;";
  if (!same(dq[1], dq[0]) || !same(dv[1], dv[0])) failed += " dq or dv not as without it;";
  if (!same(dk[1], dk[0])) failed += " dk not the segment max kernel's backward's;";
  if (same(dk[0], dk_before)) failed += " (the case adds nothing to dk);";
  if (!same(dk[0], dk_of_sum)) failed += " dk not the backward of the slabs' sum;";
  return failed;
}

// "" where fixed's local pass making its queries, the blocks' maxes of q (Forward::query_pool),
// gives what the segment max kernel and the pass reading its output give: the maxes, o and lse,
// to the bit; and where its backward taking them back in its query CTAs (Backward::query_pool)
// gives what the pass storing its queries' gradient and the segment max kernel's backward adding
// it into q's give: that gradient, dk, dv and q's, to the bit. `dy_acc`: the pass stores its
// queries' gradient in Acc (a float32 buffer of a bfloat16 pass), which the pool reads as it is.
inline std::string check_query_pool(const Case& c, const Kernels& kernels, bool dy_acc = false) {
  const FusedPass local = local_pass(c);
  const int64_t spans = local.key.segments;
  torch::manual_seed(c.L + c.W + c.D + 1);
  const auto draw = [&](int64_t n) {
    return (c.ties ? torch::randint(-2, 3, {1, 2, n, c.D}) : torch::randn({1, 2, n, c.D}))
        .to(c.dtype);
  };
  const auto q = draw(c.L), k = draw(c.L), v = draw(c.L);
  const auto acc = torch::TensorOptions().dtype(fused_glue::acc_type(c.dtype));
  const FusedPool pool = FusedPool::segment_max(true, spans, c.W);
  const double scale = 1.0 / std::sqrt(double(c.D));
  std::vector<torch::Tensor> o(2), lse(2), qs(2);
  for (const bool with : {false, true}) {
    qs[with] = torch::full({1, 2, spans, c.D}, NAN).to(c.dtype);
    fused::Forward f;
    f.pass = fused_glue::make_pass(local, qs[with], k, v, {}, {}, scale);
    if (!fused::query_pool_on_chip(f.pass, spans, c.W))
      return " the case's pass cannot make its queries";
    o[with] = torch::full({1, 2, spans, c.D}, NAN).to(c.dtype);
    lse[with] = torch::full({1, 2, spans}, NAN, acc);
    f.o = o[with].data_ptr();
    for (int d = 0; d < 3; ++d) f.o_stride[d] = o[with].stride(d);
    f.lse = lse[with].data_ptr();
    const auto made = fused_pools::on_chip_forward(pool, q, qs[with]);
    if (with)
      f.query_pool = made;
    else
      kernels.segment_max(fused::one_part(made));
    kernels.forward(f);
  }
  std::string failed;
  if (qs[1].isnan().any().item<bool>()) failed += " a max not written;";
  if (!torch::equal(qs[1], qs[0])) failed += " the maxes not the segment max kernel's;";
  if (!torch::equal(o[1], o[0]) || !torch::equal(lse[1], lse[0]))
    failed += " o or lse not as the pass's over them;";
  if (!failed.empty()) return failed;

  const auto d_o = draw(spans), dq_before = draw(c.L);  // q's gradient from the earlier passes
  const auto delta = (o[0].to(acc.dtype()) * d_o.to(acc.dtype())).sum(-1).contiguous();
  std::vector<torch::Tensor> dqs(2), dq(2), dk(2), dv(2);
  for (const bool with : {false, true}) {
    fused::Backward b;
    b.pass = fused_glue::make_pass(local, qs[0], k, v, {}, {}, scale);
    b.d_o = fused_glue::operand(d_o);
    b.lse = lse[0].data_ptr();
    b.delta = delta.data_ptr();
    dqs[with] = torch::full({1, 2, spans, c.D}, NAN, dy_acc ? acc : acc.dtype(c.dtype));
    dq[with] = dq_before.clone();
    dk[with] = torch::full({1, 2, c.L, c.D}, NAN).to(c.dtype);
    dv[with] = torch::full({1, 2, c.L, c.D}, NAN).to(c.dtype);
    b.dq = fused_glue::grad_out(dqs[with],
                                dy_acc ? fused::GradOut::kStoreAcc : fused::GradOut::kStore);
    b.dk = fused_glue::grad_out(dk[with], fused::GradOut::kStore);
    b.dv = fused_glue::grad_out(dv[with], fused::GradOut::kStore);
    const auto pool_backward = fused_pools::on_chip_backward(pool, q, dqs[with], dq[with]);
    if (with) {
      b.query_pool = pool_backward;
      if (!fused::query_pool_backward_fits(b)) return " the case's pass cannot take them back";
    }
    kernels.backward(b);
    if (!with) kernels.segment_max_backward(fused::one_part(pool_backward));
  }
  if (dqs[1].isnan().any().item<bool>()) failed += " a query's gradient not written;";
  if (!same(dqs[1], dqs[0]) || !same(dk[1], dk[0]) || !same(dv[1], dv[0]))
    failed += " the queries' gradient, dk or dv not as without it;";
  if (!same(dq[1], dq[0])) failed += " q's gradient not the segment max kernel's backward's;";
  if (same(dq[0], dq_before)) failed += " (the case adds nothing to q's gradient);";
  return failed;
}

}  // namespace combiner::attention::key_pool_cases
