// Glue between torch and the fused kernels: dtype and stride checks, allocation, the autograd
// Function (saved: q, k, v, ks, u in the kernel dtype, o and lse; with a local stage also qs and
// u's lse; cumulative pools and the u they feed made again in backward instead), the CUDA stream.
// Gradient buffers: slot_grad (q, k, v and summaries read as source A or as source B by segment:
// the kernel dtype, each pass adding its part in place; summaries read as source B by prefix: an
// Acc buffer added into atomically). The variants' plans: fused.cpp, fused_axial.cpp; the kernels
// run through fused/launch.h.
#include "attention/fused/fused.h"

#include "attention/fused/checks.h"
#include "attention/fused/launch.h"
#include "attention/fused/pool_stage.h"
#include "attention/heads.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>
#include <vector>

namespace combiner::attention {

namespace fused_glue {

using fused::GradOut;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

fused::Dtype kernel_dtype(torch::ScalarType t) {
  if (t == torch::kFloat) return fused::Dtype::kFloat32;
  if (t == torch::kBFloat16) return fused::Dtype::kBFloat16;
  if (t == torch::kDouble) return fused::Dtype::kFloat64;
  TORCH_CHECK(false, "fused attention: dtype must be float32, bfloat16 or float64, got ", t);
}

torch::ScalarType acc_type(torch::ScalarType t) {
  return t == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// x in `dtype` with a contiguous last axis and 16-byte aligned rows (what cp.async needs).
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

// The plan travels in the context as integers: 6 per geometry, then the masks and three flags.
constexpr size_t kPassInts = 5 * 6 + 5;

std::vector<int64_t> encode(const std::vector<FusedPass>& passes) {
  std::vector<int64_t> out;
  for (const auto& p : passes) {
    for (const auto* g : {&p.query, &p.key, &p.value, &p.summary_key, &p.summary_value})
      out.insert(out.end(),
                 {g->segments, g->seg_len, g->seg_stride, g->row_stride, g->limit, g->first});
    out.insert(out.end(),
               {int64_t(p.mask),
                int64_t(p.summary_mask),
                int64_t(p.summaries),
                int64_t(p.a_from_summaries),
                int64_t(p.by_segment)});
  }
  return out;
}

std::vector<FusedPass> decode(const std::vector<int64_t>& in) {
  std::vector<FusedPass> out;
  for (size_t i = 0; i + kPassInts <= in.size(); i += kPassInts) {
    FusedPass p;
    size_t at = i;
    for (auto* g : {&p.query, &p.key, &p.value, &p.summary_key, &p.summary_value}) {
      *g = {in[at], in[at + 1], in[at + 2], in[at + 3], in[at + 4], in[at + 5]};
      at += 6;
    }
    p.mask = fused::Mask(in[at]);
    p.summary_mask = fused::Mask(in[at + 1]);
    p.summaries = in[at + 2] != 0;
    p.a_from_summaries = in[at + 3] != 0;
    p.by_segment = in[at + 4] != 0;
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
  p.q = operand(q);
  p.k = operand(fp.a_from_summaries ? ks : k);
  p.v = operand(fp.a_from_summaries ? u : v);
  if (fp.summaries) {
    p.ks = operand(ks);
    p.u = operand(u);
  }
  return p;
}

// Writes into `buffer` ([B, H, rows, D], the last axis contiguous) in `kind`.
GradOut grad_out(const torch::Tensor& buffer, GradOut::Kind kind) {
  GradOut g;
  g.data = buffer.data_ptr();
  g.kind = kind;
  for (int d = 0; d < 3; ++d) g.stride[d] = buffer.stride(d);
  return g;
}

// The gradient of one input slot (q, k, v, ks or u) and how each pass writes it. `readers`: the
// passes whose gradient lands in the slot (for q every pass, for the others the passes reading
// it as source A or as source B by segment) and their geometries; `shared`: whether a pass reads
// it as source B by prefix.
//  - every reader writes each of its rows once (injective) and the slot is not shared: the
//    kernel dtype, with no Acc buffer and no atomics; the first reader stores (into an empty
//    buffer where it covers every row, else a zeroed one), each later reader adds its part in
//    place (addend = the buffer itself). Each pass's part is rounded to the kernel dtype before
//    it is added: bfloat16 sums a few partial gradients (two or three passes) in bfloat16.
//  - otherwise (summaries read by every later segment, key rows shared by segments): a zeroed
//    Acc buffer every reader adds into, converted when returned.
// `home`, when defined, is where the gradient is returned: a part of the packed gradient of q, k
// and v when they were the parts of one packed tensor (attention/heads.h). The kernel-dtype
// buffer is then `home` itself; an Acc one is copied into it at the end.
struct Grad {
  torch::Tensor buffer;          // the slot's gradient: kernel dtype or Acc
  std::vector<GradOut> by_pass;  // how pass i writes it (kind kNone: not a reader)

  GradOut out(size_t pass) const { return by_pass.empty() ? GradOut{} : by_pass[pass]; }
  // As source B by prefix (summaries): the zeroed Acc buffer, added into.
  GradOut summary_out() const {
    return buffer.defined() ? grad_out(buffer, GradOut::kAtomic) : GradOut{};
  }
};

Grad slot_grad(const torch::Tensor& x,
               const std::vector<std::pair<size_t, fused::Geometry>>& readers,
               size_t passes,
               bool shared,
               const torch::Tensor& home = {}) {
  Grad g;
  if (!x.defined() || (readers.empty() && !shared)) return g;
  g.by_pass.assign(passes, GradOut{});
  const int64_t rows = x.size(2);
  bool in_place = !shared && !readers.empty();
  for (const auto& r : readers) in_place = in_place && injective(r.second, rows);
  if (in_place && home.defined()) {
    g.buffer = covers(readers[0].second, rows) ? home : home.zero_();
  } else if (in_place) {
    g.buffer = covers(readers[0].second, rows)
                   ? torch::empty_like(x, torch::MemoryFormat::Contiguous)
                   : torch::zeros_like(x, torch::MemoryFormat::Contiguous);
  } else {
    g.buffer = torch::zeros(x.sizes(), x.options().dtype(acc_type(x.scalar_type())));
  }
  for (size_t i = 0; i < readers.size(); ++i) {
    GradOut& o = g.by_pass[readers[i].first];
    o = grad_out(g.buffer, in_place ? GradOut::kStore : GradOut::kAtomic);
    if (in_place && i > 0) {
      o.addend = g.buffer.data_ptr();
      o.addend_in_storage = true;
    }
  }
  return g;
}

// delta = rowsum(o * d_o) per query row (the backward's D of FlashAttention).
torch::Tensor row_delta(const torch::Tensor& o,
                        const torch::Tensor& d_o,
                        const torch::Tensor& lse) {
  auto delta = torch::empty_like(lse);
  fused::Delta dl;
  dl.batch = o.size(0);
  dl.heads = o.size(1);
  dl.rows = o.size(2);
  dl.dim = o.size(3);
  dl.dtype = kernel_dtype(o.scalar_type());
  dl.o = operand(o);
  dl.d_o = operand(d_o);
  dl.delta = delta.data_ptr();
  fused_launch::delta(o, dl);
  return delta;
}

// The forward of one stage: its passes over (queries, k, v, ks, u) into o and lse; with `merge`,
// every pass after the first merges into the rows it shares (the joint stage), else each pass
// stores its own rows (a local stage).
void forward_stage(const std::vector<FusedPass>& passes,
                   const torch::Tensor& queries,
                   const torch::Tensor& k,
                   const torch::Tensor& v,
                   const torch::Tensor& ks,
                   const torch::Tensor& u,
                   double scale,
                   bool merge,
                   const torch::Tensor& o,
                   const torch::Tensor& lse) {
  for (size_t i = 0; i < passes.size(); ++i) {
    fused::Forward f;
    f.pass = make_pass(passes[i], queries, k, v, ks, u, scale);
    f.o = o.data_ptr();
    for (int d = 0; d < 3; ++d) f.o_stride[d] = o.stride(d);
    f.lse = lse.data_ptr();
    f.merge = merge && i > 0;
    fused_launch::forward(queries, f);
  }
}

// The local stage: u (and its lse) from its passes over `queries` (qs, or q itself) and k, v,
// each pass storing its own rows (rows no local query writes are zeros).
std::pair<torch::Tensor, torch::Tensor> local_stage(const std::vector<FusedPass>& local,
                                                    const torch::Tensor& queries,
                                                    const torch::Tensor& k,
                                                    const torch::Tensor& v,
                                                    double scale) {
  const int64_t B = queries.size(0), H = queries.size(1), Lu = queries.size(2);
  const auto writes = local_writes(local, Lu);
  const bool every_row = std::find(writes.begin(), writes.end(), 0) == writes.end();
  const auto options = queries.options();
  auto u = every_row ? torch::empty({B, H, Lu, queries.size(3)}, options)
                     : torch::zeros({B, H, Lu, queries.size(3)}, options);
  auto lse_u = torch::empty({B, H, Lu}, options.dtype(acc_type(queries.scalar_type())));
  forward_stage(local, queries, k, v, {}, {}, scale, /*merge=*/false, u, lse_u);
  return {u, lse_u};
}

// One call: optionally max pools making ks from k and qs from q, and a local stage making the
// summary values u from the summary queries qs (or q) and k, v; then the joint stage over
// (q, k, v, ks, u). Saved: q, k, v, ks, u, o, lse and, with a local stage, qs and u's lse (with
// cumulative pools, fused_pools::remade_in_backward, their slots and the local stage's u are made
// again in backward instead).
// The backward runs the joint passes, then the local ones with u's gradient as their d_o, then the
// pools' backward; every pass and pool adds its part of dk, dv (and dq) in place.
class FusedFunction : public torch::autograd::Function<FusedFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& q_in,
                               const torch::Tensor& k_in,
                               const torch::Tensor& v_in,
                               const c10::optional<torch::Tensor>& ks_opt,
                               const c10::optional<torch::Tensor>& u_opt,
                               const c10::optional<torch::Tensor>& qs_opt,
                               const std::vector<int64_t>& plan,
                               const std::vector<int64_t>& local_plan,
                               const std::vector<int64_t>& pool_plan,
                               double scale) {
    // Optional tensors travel as optionals: an undefined tensor is no autograd input.
    const auto ks_in = ks_opt.value_or(torch::Tensor()), u_in = u_opt.value_or(torch::Tensor()),
               qs_in = qs_opt.value_or(torch::Tensor());
    const auto passes = decode(plan), local = decode(local_plan);
    const auto pools = fused_pools::decode(pool_plan);
    const auto dtype = q_in.scalar_type();
    auto q = kernel_ready(q_in, dtype), k = kernel_ready(k_in, dtype),
         v = kernel_ready(v_in, dtype), ks = kernel_ready(ks_in, dtype),
         qs = kernel_ready(qs_in, dtype);
    auto [ks_pooled, qs_pooled] = fused_pools::make(pools, k, q);  // checks.cpp: given or pooled
    if (!ks.defined()) ks = ks_pooled;
    if (!qs.defined()) qs = qs_pooled;
    const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
    const auto acc = q.options().dtype(acc_type(dtype));
    torch::Tensor u = kernel_ready(u_in, dtype), lse_u;
    if (!local.empty()) std::tie(u, lse_u) = local_stage(local, qs.defined() ? qs : q, k, v, scale);
    // o [B, H, Lq, D] laid out as [B, Lq, H, D], as SDPA's: the model's merge of the heads,
    // o.transpose(1, 2).reshape({B, Lq, H * D}), is then a view, and the output projection keeps
    // the tensor this call keeps, not a copy of it.
    auto o = torch::empty({B, Lq, H, D}, q.options()).transpose(1, 2);
    auto lse = torch::empty({B, H, Lq}, acc);
    forward_stage(passes, q, k, v, ks, u, scale, /*merge=*/true, o, lse);
    // Cumulative pools are as large as the k or q they are made from: made again in backward from
    // the saved k and q (the same kernels on the same inputs: the same bits) rather than kept, and
    // with them the local stage's u and lse, which they feed.
    const bool remake = fused_pools::remade_in_backward(pools);
    const auto kept = [&](const torch::Tensor& made, const torch::Tensor& given) {
      return remake && !given.defined() ? torch::Tensor() : made;  // made in the call: not kept
    };
    ctx->save_for_backward(
        {q, k, v, kept(ks, ks_in), kept(u, u_in), o, lse, kept(qs, qs_in), kept(lse_u, u_in)});
    // q, k and v read in place from one packed projection: their gradients are written into one
    // packed gradient too, which split_heads' backward then passes on as it is.
    ctx->saved_data["packed"] = packed_parts(q, k, v).defined();
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["local"] = local_plan;
    ctx->saved_data["pools"] = pool_plan;
    ctx->saved_data["scale"] = scale;
    auto type_of = [&](const torch::Tensor& x) {
      return int64_t(x.defined() ? x.scalar_type() : dtype);
    };
    ctx->saved_data["dtypes"] = std::vector<int64_t>{
        type_of(k_in), type_of(v_in), type_of(ks_in), type_of(u_in), type_of(qs_in)};
    return o;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &o = saved[5], &lse = saved[6];
    const auto passes = decode(ctx->saved_data["plan"].toIntVector());
    const auto local = decode(ctx->saved_data["local"].toIntVector());
    const auto pools = fused_pools::decode(ctx->saved_data["pools"].toIntVector());
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    if (!grads[0].defined()) return tensor_list(10);
    auto ks = saved[3], u = saved[4], qs = saved[7], lse_u = saved[8];
    if (fused_pools::remade_in_backward(pools)) {  // what the forward made and did not keep
      auto [ks_pooled, qs_pooled] = fused_pools::make(pools, k, q);
      if (!ks.defined()) ks = ks_pooled;
      if (!qs.defined()) qs = qs_pooled;
      if (!local.empty() && !u.defined())
        std::tie(u, lse_u) = local_stage(local, qs.defined() ? qs : q, k, v, scale);
    }
    const auto dtype = q.scalar_type();
    const auto d_o = kernel_ready(grads[0], dtype);
    const int64_t B = q.size(0), H = q.size(1), D = q.size(3);
    const auto delta = row_delta(o, d_o, lse);

    // Who writes each gradient, in the order the passes run: the joint passes 0..n-1, then the
    // local ones n..n+m-1 (their queries are qs, or q itself).
    const size_t n = passes.size(), total = n + local.size();
    const bool local_q = !local.empty() && !qs.defined();
    std::vector<std::pair<size_t, fused::Geometry>> q_uses, k_uses, v_uses, ks_uses, u_uses,
        qs_uses;
    bool summaries = false;  // a pass reads them by prefix
    for (size_t i = 0; i < n; ++i) {
      const auto& p = passes[i];
      q_uses.emplace_back(i, p.query);
      (p.a_from_summaries ? ks_uses : k_uses).emplace_back(i, p.key);
      (p.a_from_summaries ? u_uses : v_uses).emplace_back(i, p.value);
      if (p.summaries && p.by_segment) {
        ks_uses.emplace_back(i, p.summary_key);
        u_uses.emplace_back(i, p.summary_value);
      }
      summaries = summaries || (p.summaries && !p.by_segment);
    }
    // A local stage whose u no joint pass reads adds no gradient (its passes do not run).
    const bool u_read = !u_uses.empty() || summaries;
    // Where the local passes store every row of qs once, qs's gradient is written over u's (the
    // local passes' d_o): each pass reads a row's d_o before it writes that row's dq (kernel.h).
    const auto writes = qs.defined() ? local_writes(local, qs.size(2)) : std::vector<int64_t>{};
    const bool dqs_over_du =
        !writes.empty() &&
        std::all_of(writes.begin(), writes.end(), [](int64_t w) { return w == 1; });
    for (size_t j = 0; u_read && j < local.size(); ++j) {
      if (!dqs_over_du) (local_q ? q_uses : qs_uses).emplace_back(n + j, local[j].query);
      k_uses.emplace_back(n + j, local[j].key);
      v_uses.emplace_back(n + j, local[j].value);
    }
    std::array<torch::Tensor, 3> homes;  // where dq, dk, dv are returned (undefined: anywhere)
    if (ctx->saved_data["packed"].toBool()) homes = new_packed_parts(q);
    Grad dq = slot_grad(q, q_uses, total, false, homes[0]),
         dk = slot_grad(k, k_uses, total, false, homes[1]),
         dv = slot_grad(v, v_uses, total, false, homes[2]),
         dks = slot_grad(ks, ks_uses, total, summaries),
         du = slot_grad(u, u_uses, total, summaries), dqs = slot_grad(qs, qs_uses, total, false);
    for (size_t i = 0; i < n; ++i) {
      fused::Backward bw;
      bw.pass = make_pass(passes[i], q, k, v, ks, u, scale);
      bw.d_o = operand(d_o);
      bw.lse = lse.data_ptr();
      bw.delta = delta.data_ptr();
      bw.dq = dq.out(i);
      const bool a_summ = passes[i].a_from_summaries;
      Grad& key_grad = a_summ ? dks : dk;
      bw.dk = key_grad.out(i);
      bw.dv = (a_summ ? du : dv).out(i);
      // Segments sharing their key rows: one slab each (no atomics), summed after the pass.
      const auto& key = passes[i].key;
      torch::Tensor slabs;
      if (bw.dk.kind == GradOut::kAtomic && key.seg_stride == 0 && key.segments > 1) {
        slabs = torch::zeros({B, H, key.segments * key.limit, D}, lse.options());
        bw.dk = grad_out(slabs, GradOut::kStoreAcc);
        bw.dk.segment_rows = key.limit;
      }
      if (passes[i].summaries && passes[i].by_segment) {
        bw.dks = dks.out(i);
        bw.du = du.out(i);
      } else if (passes[i].summaries) {
        bw.dks = dks.summary_out();
        bw.du = du.summary_out();
      }
      fused_launch::backward(q, bw);
      if (slabs.defined()) {
        key_grad.buffer.narrow(2, 0, key.limit)
            .add_(slabs.view({B, H, key.segments, key.limit, D}).sum(2));
      }
    }
    torch::Tensor d_u;  // u's gradient when it is an input; else the local passes' d_o
    if (!local.empty() && du.buffer.defined()) {
      const auto d_o_u = kernel_ready(du.buffer, dtype);
      const auto delta_u = row_delta(u, d_o_u, lse_u);
      if (dqs_over_du) {
        dqs.buffer = d_o_u;
        dqs.by_pass.assign(total, GradOut{});
        for (size_t j = 0; j < local.size(); ++j) {
          dqs.by_pass[n + j] = grad_out(d_o_u, GradOut::kStore);
        }
      }
      const auto& queries = local_q ? q : qs;
      for (size_t j = 0; j < local.size(); ++j) {
        fused::Backward bw;
        bw.pass = make_pass(local[j], queries, k, v, {}, {}, scale);
        bw.d_o = operand(d_o_u);
        bw.lse = lse_u.data_ptr();
        bw.delta = delta_u.data_ptr();
        bw.dq = (local_q ? dq : dqs).out(n + j);
        bw.dk = dk.out(n + j);
        bw.dv = dv.out(n + j);
        fused_launch::backward(q, bw);
      }
    } else if (du.buffer.defined()) {
      d_u = du.buffer.to(torch::ScalarType(dtypes[3]));
    }
    // Pooled slots are no inputs: their gradients go through the pools into k's and q's.
    if (!pools.empty()) {
      const auto pooled = [&](bool query_side) {
        return std::any_of(pools.begin(), pools.end(), [&](const FusedPool& p) {
          return p.query_side == query_side;
        });
      };
      const auto through = [&](Grad& slot, bool query_side) {
        return pooled(query_side) ? std::exchange(slot.buffer, torch::Tensor()) : torch::Tensor();
      };
      const auto d_ks = through(dks, false), d_qs = through(dqs, true);
      fused_pools::add_backward(pools, k, d_ks, dk.buffer, q, d_qs, dq.buffer);
    }
    auto as = [&](const Grad& g, int64_t type) {
      return g.buffer.defined() ? g.buffer.to(torch::ScalarType(type)) : torch::Tensor();
    };
    // A packed part: the buffer itself, or the buffer copied into it (zeros where none).
    auto at_home = [&](const Grad& g, const torch::Tensor& home, int64_t type) -> torch::Tensor {
      if (!home.defined()) return as(g, type);
      if (!g.buffer.defined()) return home.zero_();
      if (!g.buffer.is_same(home)) home.copy_(g.buffer);
      return home;
    };
    return {at_home(dq, homes[0], int64_t(dtype)),
            at_home(dk, homes[1], dtypes[0]),
            at_home(dv, homes[2], dtypes[1]),
            as(dks, dtypes[2]),
            d_u,
            as(dqs, dtypes[4]),
            {},
            {},
            {},
            {}};
  }
};

}  // namespace fused_glue

namespace {
c10::optional<torch::Tensor> optional(const torch::Tensor& x) {
  return x.defined() ? c10::optional<torch::Tensor>(x) : c10::nullopt;
}
}  // namespace

torch::Tensor fused_attention(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v,
                              const torch::Tensor& ks,
                              const torch::Tensor& u,
                              const std::vector<FusedPass>& passes,
                              double scale) {
  fused_glue::check_qkv(q, k, v);
  if (ks.defined()) fused_glue::check_frame(q, ks, "ks");
  if (u.defined()) fused_glue::check_frame(q, u, "u");
  fused_glue::check_operands(
      q, k, v, ks.defined() ? ks.size(2) : 0, u.defined() ? u.size(2) : 0, passes);
  return fused_glue::FusedFunction::apply(q,
                                          k,
                                          v,
                                          optional(ks),
                                          optional(u),
                                          c10::nullopt,
                                          fused_glue::encode(passes),
                                          std::vector<int64_t>{},
                                          std::vector<int64_t>{},
                                          scale);
}

torch::Tensor fused_attention_with_local(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         const torch::Tensor& ks,
                                         const torch::Tensor& qs,
                                         const std::vector<FusedPass>& local,
                                         const std::vector<FusedPass>& passes,
                                         double scale,
                                         const std::vector<FusedPool>& pools) {
  fused_glue::check_qkv(q, k, v);
  TORCH_CHECK(!local.empty(), "fused attention: a local stage needs at least one pass");
  if (ks.defined()) fused_glue::check_frame(q, ks, "ks");
  if (qs.defined()) fused_glue::check_frame(q, qs, "qs");
  const int64_t ks_rows = fused_glue::check_pools(k, ks, pools, /*query_side=*/false);
  const int64_t qs_rows = fused_glue::check_pools(q, qs, pools, /*query_side=*/true);
  // The local stage's queries: qs (given or pooled), or q itself.
  const int64_t query_rows = qs_rows > 0 ? qs_rows : q.size(2);
  fused_glue::check_local(query_rows, k, v, local);
  fused_glue::check_operands(q, k, v, ks_rows, query_rows, passes);
  return fused_glue::FusedFunction::apply(q,
                                          k,
                                          v,
                                          optional(ks),
                                          c10::nullopt,
                                          optional(qs),
                                          fused_glue::encode(passes),
                                          fused_glue::encode(local),
                                          fused_pools::encode(pools),
                                          scale);
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
