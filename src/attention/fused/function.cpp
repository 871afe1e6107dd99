// Glue between torch and the fused kernels: dtypes and strides, allocation, the plan as integers,
// the forward of a call (function.h forward_call; its record: q, k, v, ks, u in the kernel dtype,
// o and lse; with a local stage also qs and u's lse; cumulative pools and the u they feed made
// again in backward instead), and what fits on chip. Its backward: backward.cpp; the autograd
// nodes and the entry points: nodes.cpp. The variants' plans: fused.cpp, fused_axial.cpp; the
// kernels run through fused/launch.h.
#include "attention/fused/function.h"

#include "attention/fused/checks.h"
#include "attention/fused/launch.h"
#include "attention/fused/pool_stage.h"
#include "attention/heads.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace combiner::attention {

namespace fused_glue {

using fused::GradOut;

fused::Dtype kernel_dtype(torch::ScalarType t) {
  if (t == torch::kFloat) return fused::Dtype::kFloat32;
  if (t == torch::kBFloat16) return fused::Dtype::kBFloat16;
  if (t == torch::kDouble) return fused::Dtype::kFloat64;
  TORCH_CHECK(false, "fused attention: dtype must be float32, bfloat16 or float64, got ", t);
}

torch::ScalarType acc_type(torch::ScalarType t) {
  return t == torch::kDouble ? torch::kDouble : torch::kFloat;
}

torch::Tensor kernel_ready(const torch::Tensor& x, torch::ScalarType dtype) {
  if (!x.defined()) return x;
  auto y = x.to(dtype);
  const int64_t align = 16 / y.element_size();
  bool ok = y.stride(3) == 1 && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d < 3; ++d) ok = ok && (y.size(d) == 1 || y.stride(d) % align == 0);
  return ok ? y : y.contiguous();
}

fused::Operand operand(const torch::Tensor& x) {
  if (!x.defined()) return {};
  return {x.data_ptr(), x.stride(0), x.stride(1), x.stride(2)};
}

// The plan travels in the context as integers: 6 per geometry, then the masks and four flags.
constexpr size_t kPassInts = 7 * 6 + 6;

std::vector<int64_t> encode(const std::vector<FusedPass>& passes) {
  std::vector<int64_t> out;
  for (const auto& p : passes) {
    for (const auto* g : {&p.query,
                          &p.key,
                          &p.value,
                          &p.summary_key,
                          &p.summary_value,
                          &p.pooled_query,
                          &p.pooled_keys})
      out.insert(out.end(),
                 {g->segments, g->seg_len, g->seg_stride, g->row_stride, g->limit, g->first});
    out.insert(out.end(),
               {int64_t(p.mask),
                int64_t(p.summary_mask),
                int64_t(p.summaries),
                int64_t(p.a_from_summaries),
                int64_t(p.by_segment),
                int64_t(p.pooled)});
  }
  return out;
}

std::vector<FusedPass> decode(const std::vector<int64_t>& in) {
  std::vector<FusedPass> out;
  for (size_t i = 0; i + kPassInts <= in.size(); i += kPassInts) {
    FusedPass p;
    size_t at = i;
    for (auto* g : {&p.query,
                    &p.key,
                    &p.value,
                    &p.summary_key,
                    &p.summary_value,
                    &p.pooled_query,
                    &p.pooled_keys}) {
      *g = {in[at], in[at + 1], in[at + 2], in[at + 3], in[at + 4], in[at + 5]};
      at += 6;
    }
    p.mask = fused::Mask(in[at]);
    p.summary_mask = fused::Mask(in[at + 1]);
    p.summaries = in[at + 2] != 0;
    p.a_from_summaries = in[at + 3] != 0;
    p.by_segment = in[at + 4] != 0;
    p.pooled = in[at + 5] != 0;
    out.push_back(p);
  }
  return out;
}

fused::Pass make_pass(const FusedPass& fp,
                      const torch::Tensor& q,
                      const torch::Tensor& k,
                      const torch::Tensor& v,
                      const torch::Tensor& ks,
                      const torch::Tensor& u,
                      double scale) {
  // (The forward kernel takes the row max of the unscaled scores: kernel_forward.cu.)
  TORCH_CHECK(scale > 0, "fused attention: the score scale must be positive, got ", scale);
  fused::Pass p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.dim = q.size(3);
  p.scale = scale;
  p.dtype = kernel_dtype(q.scalar_type());
  p.query = fp.query;
  p.key = fp.key;
  p.value = fp.value;
  p.mask = fp.mask;
  p.summaries = fp.summaries;
  p.summary_count = fp.summaries && !fp.by_segment ? ks.size(2) : 0;
  p.by_segment = fp.summaries && fp.by_segment;
  p.summary_key = fp.summary_key;
  p.summary_value = fp.summary_value;
  p.summary_mask = fp.summary_mask;
  p.pooled = fp.pooled;
  p.pooled_query = fp.pooled_query;
  p.pooled_keys = fp.pooled_keys;
  p.q = operand(q);
  p.k = operand(fp.a_from_summaries ? ks : k);
  p.v = operand(fp.a_from_summaries ? u : v);
  if (fp.summaries) {
    p.ks = operand(ks);
    p.u = operand(u);
  }
  return p;
}

GradOut grad_out(const torch::Tensor& buffer, GradOut::Kind kind) {
  GradOut g;
  g.data = buffer.data_ptr();
  g.kind = kind;
  for (int d = 0; d < 3; ++d) g.stride[d] = buffer.stride(d);
  return g;
}

fused::Delta delta_of(const torch::Tensor& o,
                      const torch::Tensor& d_o,
                      const torch::Tensor& delta,
                      const torch::Tensor& other_delta) {
  fused::Delta dl;
  dl.batch = o.size(0);
  dl.heads = o.size(1);
  dl.rows = o.size(2);
  dl.dim = o.size(3);
  dl.dtype = kernel_dtype(o.scalar_type());
  dl.o = operand(o);
  dl.d_o = operand(d_o);
  dl.delta = delta.data_ptr();
  if (other_delta.defined()) {
    TORCH_CHECK(other_delta.sizes() == delta.sizes() && other_delta.is_contiguous() &&
                    other_delta.scalar_type() == delta.scalar_type(),
                "fused attention: the other call's delta is laid out as this call's");
    dl.other_delta = other_delta.data_ptr();
  }
  return dl;
}

torch::Tensor row_delta(const torch::Tensor& o,
                        const torch::Tensor& d_o,
                        const torch::Tensor& lse,
                        const torch::Tensor& other_delta) {
  auto delta = unset(lse.sizes(), lse.options());
  fused_launch::delta(o, delta_of(o, d_o, delta, other_delta));
  return delta;
}

// Pass `fp`'s forward over (queries, k, v, ks, u) into o and lse.
fused::Forward stage_pass(const FusedPass& fp,
                          const torch::Tensor& queries,
                          const torch::Tensor& k,
                          const torch::Tensor& v,
                          const torch::Tensor& ks,
                          const torch::Tensor& u,
                          double scale,
                          const torch::Tensor& o,
                          const torch::Tensor& lse) {
  fused::Forward f;
  f.pass = make_pass(fp, queries, k, v, ks, u, scale);
  f.o = o.data_ptr();
  for (int d = 0; d < 3; ++d) f.o_stride[d] = o.stride(d);
  f.lse = lse.data_ptr();
  return f;
}

// A joint pass reading no slot that runs in the launch of a local pass (fused::same_ctas:
// vertical's column pass and its local pass at L 3072, one CTA per column each; rowmajor's and
// horizontal's row pass and their prefix pass at rows of 48), or passes.size().
size_t paired_joint(const std::vector<FusedPass>& passes,
                    const std::vector<FusedPass>& local,
                    const torch::Tensor& q,
                    double scale) {
  for (size_t i = 0; i < passes.size(); ++i) {
    if (passes[i].a_from_summaries || passes[i].summaries) continue;
    const auto joint = make_pass(passes[i], q, q, q, {}, {}, scale);
    for (const auto& l : local)
      if (fused::same_ctas(joint, make_pass(l, q, q, q, {}, {}, scale))) return i;
  }
  return passes.size();
}

std::pair<torch::Tensor, torch::Tensor> local_stage(const std::vector<FusedPass>& local,
                                                    const torch::Tensor& q,
                                                    const torch::Tensor& qs,
                                                    const torch::Tensor& k,
                                                    const torch::Tensor& v,
                                                    const torch::Tensor& ks,
                                                    int64_t Lu,
                                                    const std::vector<FusedPass>& readers,
                                                    double scale,
                                                    const fused::Forward* with,
                                                    const fused::Delta& delta,
                                                    const std::vector<FusedPool>& pools) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3);
  const auto writes = local_writes(local, Lu);
  std::vector<char> written(Lu, 0);
  for (int64_t r = 0; r < Lu; ++r) written[r] = writes[r] > 0;
  const bool read_rows_written = names_only(slot_reads(readers, /*values=*/true, Lu), written);
  const auto options = q.options();
  auto u = read_rows_written ? unset({B, H, Lu, D}, options) : torch::zeros({B, H, Lu, D}, options);
  auto lse_u = unset({B, H, Lu}, options.dtype(acc_type(q.scalar_type())));
  TORCH_CHECK(!delta.delta || (!with && !local.empty()),
              "fused attention: a local stage's delta needs a local pass and no joint one");
  bool delta_made = !delta.delta;
  for (const auto& pass : local) {
    fused::Forward f = stage_pass(pass, local_queries(pass, q, qs), k, v, {}, {}, scale, u, lse_u);
    if (!delta_made) {
      f.delta = delta;
      delta_made = true;
    }
    for (const auto& pool : pools) {  // its keys' or its queries' segment max, made on chip
      if (pool.on_chip && key_pool_fits_on_chip(pass, q, pool))
        f.key_pool = fused_pools::on_chip_forward(pool, k, ks);
      if (pool.on_chip && query_pool_fits_on_chip(pass, q, pool))
        f.query_pool = fused_pools::on_chip_forward(pool, q, qs);
    }
    if (pass.pooled) {
      TORCH_CHECK(ks.defined() && ks.stride(3) == 1,
                  "fused attention: a pooled local pass needs the ks slot to write into");
      f.pooled_keys = ks.data_ptr();
      for (int d = 0; d < 3; ++d) f.pooled_keys_stride[d] = ks.stride(d);
    }
    if (with && fused::same_ctas(with->pass, f.pass)) {
      const fused::ForwardPair pair = {*with, f};
      with = nullptr;
      if (fused::pairable(pair.first, pair.second)) {
        fused_launch::forward_pair(q, pair);
        continue;
      }
      fused_launch::forward(q, pair.first);
    }
    fused_launch::forward(q, f);
  }
  if (with) fused_launch::forward(q, *with);
  return {u, lse_u};
}

const torch::Tensor& local_queries(const FusedPass& local,
                                   const torch::Tensor& q,
                                   const torch::Tensor& qs) {
  return local.pooled || !qs.defined() ? q : qs;
}

int64_t local_rows(const std::vector<FusedPass>& local,
                   const torch::Tensor& qs,
                   const std::vector<FusedPool>& pools) {
  if (qs.defined()) return qs.size(2);
  const int64_t pooled = fused_pools::slot_rows(pools, /*query_side=*/true);
  return pooled > 0 ? pooled : local.front().query.limit;
}

torch::Tensor forward_call(const torch::Tensor& q_in,
                           const torch::Tensor& k_in,
                           const torch::Tensor& v_in,
                           const torch::Tensor& ks_in,
                           const torch::Tensor& u_in,
                           const torch::Tensor& qs_in,
                           const CallPlan& plan,
                           CallRecord& record,
                           const torch::Tensor& mean_with) {
  const auto passes = decode(plan.passes), local = decode(plan.local);
  const auto pools = fused_pools::decode(plan.pools);
  const double scale = plan.scale;
  const auto dtype = q_in.scalar_type();
  auto q = kernel_ready(q_in, dtype), k = kernel_ready(k_in, dtype), v = kernel_ready(v_in, dtype),
       ks = kernel_ready(ks_in, dtype), qs = kernel_ready(qs_in, dtype);
  auto [ks_pooled, qs_pooled] = fused_pools::make(pools, k, q);  // checks.cpp: given or pooled
  if (!ks.defined()) ks = ks_pooled;
  if (!qs.defined()) qs = qs_pooled;
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
  const auto acc = q.options().dtype(acc_type(dtype));
  // o [B, H, Lq, D] laid out as [B, Lq, H, D], as SDPA's: the model's merge of the heads,
  // o.transpose(1, 2).reshape({B, Lq, H * D}), is then a view, and the output projection keeps
  // the tensor this call keeps, not a copy of it.
  auto o = unset({B, Lq, H, D}, q.options()).transpose(1, 2);
  auto lse = unset({B, H, Lq}, acc);
  // A joint pass over a local pass's CTAs runs in its launch, first of the joint passes.
  torch::Tensor u = kernel_ready(u_in, dtype), lse_u;
  const size_t paired = local.empty() ? passes.size() : paired_joint(passes, local, q, scale);
  if (!local.empty()) {
    const auto with = paired < passes.size()
                          ? stage_pass(passes[paired], q, k, v, ks, u, scale, o, lse)
                          : fused::Forward();
    std::tie(u, lse_u) = local_stage(local,
                                     q,
                                     qs,
                                     k,
                                     v,
                                     ks,
                                     local_rows(local, qs, pools),
                                     passes,
                                     scale,
                                     paired < passes.size() ? &with : nullptr,
                                     {},
                                     pools);
  }
  // The joint stage: every pass after the first to store its rows merges into them (the paired
  // one, where there is one, stored them in the local stage's launch). The last to run (the last
  // but the paired one, which ran first), where it is launched alone over every row of o, stores
  // the mean with `mean_with` there.
  const size_t last = passes.size() - (paired + 1 == passes.size() ? 2 : 1);
  record.mean = mean_with.defined() && last < passes.size() && last != paired &&
                covers(passes[last].query, Lq);
  if (record.mean)
    TORCH_CHECK(mean_with.sizes() == o.sizes() && mean_with.strides() == o.strides() &&
                    mean_with.scalar_type() == o.scalar_type(),
                "fused attention: the mean of two calls' outputs takes them laid out alike");
  bool stored = paired < passes.size();
  for (size_t i = 0; i < passes.size(); ++i) {
    if (i == paired) continue;
    fused::Forward f = stage_pass(passes[i], q, k, v, ks, u, scale, o, lse);
    f.merge = stored;
    if (i == last && record.mean) f.mean_with = mean_with.data_ptr();
    stored = true;
    fused_launch::forward(q, f);
  }
  // Cumulative pools are as large as the k or q they are made from: made again in backward from
  // the saved k and q (the same kernels on the same inputs: the same bits) rather than kept, and
  // with them the local stage's u and lse, which they feed.
  const bool remake = fused_pools::remade_in_backward(pools);
  const auto kept = [&](const torch::Tensor& made, const torch::Tensor& given) {
    return remake && !given.defined() ? torch::Tensor() : made;  // made in the call: not kept
  };
  record.tensors = {
      q, k, v, kept(ks, ks_in), kept(u, u_in), o, lse, kept(qs, qs_in), kept(lse_u, u_in)};
  record.plan = plan;
  // q, k and v read in place from one packed projection: their gradients are written into one
  // packed gradient too, which split_heads' backward then passes on as it is.
  record.packed = packed_parts(q, k, v).defined();
  auto type_of = [&](const torch::Tensor& x) {
    return int64_t(x.defined() ? x.scalar_type() : dtype);
  };
  record.dtypes = {type_of(k_in), type_of(v_in), type_of(ks_in), type_of(u_in), type_of(qs_in)};
  return o;
}

}  // namespace fused_glue

namespace {
// `local` as a pooled pass over q's dtype and head dim (its pools from its keys' rows).
fused::Pass pooled_pass(const FusedPass& local, const torch::Tensor& q) {
  fused::Pass p;
  p.dim = q.size(3);
  p.dtype = fused_glue::kernel_dtype(q.scalar_type());
  p.query = local.query;
  p.key = local.key;
  p.value = local.value;
  p.mask = local.mask;
  p.pooled = true;
  p.pooled_query = local.key;
  return p;
}
}  // namespace

bool pools_fit_on_chip(const FusedPass& local, const torch::Tensor& q) {
  return !local.summaries && !local.a_from_summaries && fused::pools_on_chip(pooled_pass(local, q));
}

bool pools_backward_fit_on_chip(const FusedPass& local, const torch::Tensor& q) {
  return pools_fit_on_chip(local, q) && fused::pools_backward_on_chip(pooled_pass(local, q));
}

bool key_pool_fits_on_chip(const FusedPass& local, const torch::Tensor& q, const FusedPool& pool) {
  if (pool.kind != FusedPool::Kind::kSegmentMax || pool.query_side || pool.first != 0) return false;
  const auto p = fused_glue::make_pass(local, q, q, q, {}, {}, 1.0);
  return !local.a_from_summaries && fused::key_pool_on_chip(p, pool.segments, pool.len);
}

bool key_pool_backward_fits_on_chip(const FusedPass& local,
                                    const torch::Tensor& q,
                                    const FusedPool& pool) {
  const auto p = fused_glue::make_pass(local, q, q, q, {}, {}, 1.0);
  return key_pool_fits_on_chip(local, q, pool) &&
         fused::key_pool_backward_on_chip(p, pool.segments, pool.len);
}

bool query_pool_fits_on_chip(const FusedPass& local,
                             const torch::Tensor& q,
                             const FusedPool& pool) {
  if (pool.kind != FusedPool::Kind::kSegmentMax || !pool.query_side || pool.first != 0)
    return false;
  const auto p = fused_glue::make_pass(local, q, q, q, {}, {}, 1.0);
  return !local.a_from_summaries && fused::query_pool_on_chip(p, pool.segments, pool.len);
}

std::string fused_cuda_unavailable(const torch::Tensor& q, const torch::Tensor& v) {
  if (!q.is_cuda()) return "CPU tensors";
#ifndef COMBINER_WITH_CUDA_KERNELS
  return "this build has no CUDA kernels";
#else
  const auto t = q.scalar_type();
  if (t != torch::kFloat && t != torch::kBFloat16)
    return std::string("dtype ") + c10::toString(t) + " (kernels: float32, bfloat16)";
  if (v.size(3) != q.size(3))
    return "D = " + std::to_string(q.size(3)) + " != Dv = " + std::to_string(v.size(3));
  if (!fused::cuda_supports(fused_glue::kernel_dtype(t), q.size(3)))
    return "head dim " + std::to_string(q.size(3)) + " (kernels: 32, 64, 128)";
  if (q.size(0) * q.size(1) > 65535)
    return "B * H = " + std::to_string(q.size(0) * q.size(1)) + " > 65535";
  return "";
#endif
}

}  // namespace combiner::attention
