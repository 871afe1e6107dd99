// Glue between torch and the fused kernels: dtype and stride checks, allocation, the autograd
// Function (saved: q, k, v, ks, u in the kernel dtype, o and lse), the CUDA stream, and
// combiner-fixed's plan (the axial variants' plans: fused_axial.cpp). Gradient buffers: slot_grad
// (q, k, v and summaries read as source A: the kernel dtype, each pass adding its part in place;
// summaries read as source B: an Acc buffer added into atomically).
#include "attention/fused/fused.h"

#include <spdlog/spdlog.h>

#include "attention/attention.h"
#include "attention/span_ops.h"

#include <mutex>
#include <set>

#ifdef COMBINER_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

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

// Whether the segments of g own disjoint rows that together are every row 0..rows-1: blocks,
// columns, or whole blocks read right to left (which exist whole or not at all).
bool covers(const fused::Geometry& g, int64_t rows) {
  const bool blocks = g.row_stride == 1 && g.seg_stride == g.seg_len && g.first == 0;
  const bool columns = g.seg_stride == 1 && g.row_stride == g.segments && g.first == 0;
  const bool reversed = g.row_stride == -1 && g.seg_stride == g.seg_len &&
                        g.first == g.seg_len - 1 && g.segments * g.seg_len == rows;
  return (blocks || columns || reversed) && g.segments * g.seg_len >= rows && g.limit >= rows;
}

// The lowest row a geometry reads is not negative (a right-to-left segment ends at its first
// row minus seg_len - 1).
bool non_negative(const fused::Geometry& g) {
  const int64_t last = g.row_stride < 0 ? (g.seg_len - 1) * g.row_stride : 0;
  return g.segments == 0 || g.seg_len == 0 || (g.first + last >= 0 && g.seg_stride >= 0);
}

// What the kernels index must exist: o, lse and dq have exactly Lq rows, so every pass's queries
// end at Lq; a geometry never reaches past the rows of the tensor it reads; the summary rows a
// pass reads (summary_count = rows of ks) exist in u; every tensor on q's device with q's B, H, D.
void check_operands(const torch::Tensor& q,
                    const torch::Tensor& k,
                    const torch::Tensor& v,
                    const torch::Tensor& ks,
                    const torch::Tensor& u,
                    const std::vector<FusedPass>& passes) {
  const int64_t Lq = q.size(2);
  TORCH_CHECK(!passes.empty() && covers(passes[0].query, Lq) && covers(passes.back().query, Lq),
              "fused attention: the first and last pass must cover every query row");
  auto same_frame = [&](const torch::Tensor& x, const char* name) {
    TORCH_CHECK(
        x.dim() == 4 && x.size(0) == q.size(0) && x.size(1) == q.size(1) && x.size(3) == q.size(3),
        "fused attention: ",
        name,
        " must be [B, H, rows, D] with q's B, H, D ",
        q.sizes(),
        ", got ",
        x.sizes());
    TORCH_CHECK(x.device() == q.device(),
                "fused attention: ",
                name,
                " is on ",
                x.device(),
                ", q on ",
                q.device());
  };
  same_frame(k, "k");
  same_frame(v, "v");
  if (ks.defined()) same_frame(ks, "ks");
  if (u.defined()) same_frame(u, "u");
  auto fits = [](const fused::Geometry& g, int64_t rows, const char* what) {
    TORCH_CHECK(g.limit <= rows,
                "fused attention: ",
                what,
                " rows end at ",
                g.limit,
                " but the tensor has ",
                rows);
    TORCH_CHECK(non_negative(g),
                "fused attention: ",
                what,
                " reads rows below 0 (first ",
                g.first,
                ", seg_stride ",
                g.seg_stride,
                ", row_stride ",
                g.row_stride,
                ")");
  };
  for (const auto& p : passes) {
    fits(p.query, Lq, "query");
    TORCH_CHECK(p.query.limit == Lq,
                "fused attention: a pass's queries end at ",
                p.query.limit,
                ", q has ",
                Lq,
                " rows (o, lse and dq are indexed by it)");
    const bool summaries = p.summaries || p.a_from_summaries;
    TORCH_CHECK(!summaries || (ks.defined() && u.defined()),
                "fused attention: a pass reads summaries but ks or u is undefined");
    fits(p.key, p.a_from_summaries ? ks.size(2) : k.size(2), "source A key");
    fits(p.value, p.a_from_summaries ? u.size(2) : v.size(2), "source A value");
    if (p.summaries)
      TORCH_CHECK(u.size(2) >= ks.size(2),
                  "fused attention: ",
                  ks.size(2),
                  " summary keys but only ",
                  u.size(2),
                  " summary values");
  }
}

// The plan travels in the context as integers: 6 per geometry, then mask and two flags.
constexpr size_t kPassInts = 3 * 6 + 3;

std::vector<int64_t> encode(const std::vector<FusedPass>& passes) {
  std::vector<int64_t> out;
  for (const auto& p : passes) {
    for (const auto* g : {&p.query, &p.key, &p.value})
      out.insert(out.end(),
                 {g->segments, g->seg_len, g->seg_stride, g->row_stride, g->limit, g->first});
    out.insert(out.end(), {int64_t(p.mask), int64_t(p.summaries), int64_t(p.a_from_summaries)});
  }
  return out;
}

std::vector<FusedPass> decode(const std::vector<int64_t>& in) {
  std::vector<FusedPass> out;
  for (size_t i = 0; i + kPassInts <= in.size(); i += kPassInts) {
    FusedPass p;
    size_t at = i;
    for (auto* g : {&p.query, &p.key, &p.value}) {
      *g = {in[at], in[at + 1], in[at + 2], in[at + 3], in[at + 4], in[at + 5]};
      at += 6;
    }
    p.mask = fused::Mask(in[at]);
    p.summaries = in[at + 1] != 0;
    p.a_from_summaries = in[at + 2] != 0;
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
  p.summary_count = fp.summaries ? ks.size(2) : 0;
  p.q = operand(q);
  p.k = operand(fp.a_from_summaries ? ks : k);
  p.v = operand(fp.a_from_summaries ? u : v);
  if (fp.summaries) {
    p.ks = operand(ks);
    p.u = operand(u);
  }
  return p;
}

#ifdef COMBINER_WITH_CUDA_KERNELS
void* stream_of(const torch::Tensor& x) {
  return c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
}
#endif

// Runs the kernel on x's device: the CUDA kernels, or the CPU model.
template <typename Arg>
void run(const torch::Tensor& x,
         const Arg& arg,
         void (*cpu)(const Arg&),
         void (*cuda)(const Arg&, void*)) {
  if (!x.is_cuda()) return cpu(arg);
#ifdef COMBINER_WITH_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(x.device());
  cuda(arg, stream_of(x));
#else
  (void)cuda;
  TORCH_CHECK(false, "fused attention: this build has no CUDA kernels (", x.device(), ")");
#endif
}

#ifdef COMBINER_WITH_CUDA_KERNELS
constexpr auto kForwardCuda = &fused::forward_cuda;
constexpr auto kDeltaCuda = &fused::delta_cuda;
constexpr auto kBackwardCuda = &fused::backward_cuda;
#else
constexpr void (*kForwardCuda)(const fused::Forward&, void*) = nullptr;
constexpr void (*kDeltaCuda)(const fused::Delta&, void*) = nullptr;
constexpr void (*kBackwardCuda)(const fused::Backward&, void*) = nullptr;
#endif

// Whether no two indices (g, t) of g name the same row: each row is then written by one CTA,
// once, in a pass, so a later pass may add its part in place.
bool injective(const fused::Geometry& g, int64_t rows) {
  if (covers(g, rows)) return true;
  std::vector<char> seen(rows, 0);
  for (int64_t s = 0; s < g.segments; ++s)
    for (int64_t t = 0; t < fused::valid_count(g, s); ++t) {
      const int64_t r = fused::row_of(g, s, t);
      if (r < 0 || r >= rows || seen[r]++) return false;
    }
  return true;
}

// The gradient of one input slot (q, k, v, ks or u) and how each pass writes it. `readers`: the
// passes whose gradient lands in the slot (for q every pass, for the others the passes reading
// it as source A) and their geometries; `shared`: whether a pass reads it as source B.
//  - every reader writes each of its rows once (injective) and the slot is not shared: the
//    kernel dtype, with no Acc buffer and no atomics; the first reader stores (into an empty
//    buffer where it covers every row, else a zeroed one), each later reader adds its part in
//    place (addend = the buffer itself). Each pass's part is rounded to the kernel dtype before
//    it is added: bfloat16 sums a few partial gradients (two or three passes) in bfloat16.
//  - otherwise (summaries read by every later segment, key rows shared by segments): a zeroed
//    Acc buffer every reader adds into, converted when returned.
struct Grad {
  torch::Tensor buffer;          // the slot's gradient: kernel dtype or Acc
  std::vector<GradOut> by_pass;  // how pass i writes it (kind kNone: not a reader)

  GradOut out(size_t pass) const { return by_pass.empty() ? GradOut{} : by_pass[pass]; }
  // As source B (summaries): the zeroed Acc buffer, added into.
  GradOut summary_out() const {
    GradOut g;
    if (!buffer.defined()) return g;
    g.kind = GradOut::kAtomic;
    g.data = buffer.data_ptr();
    g.rows = buffer.size(2);
    return g;
  }
};

Grad slot_grad(const torch::Tensor& x,
               const std::vector<std::pair<size_t, fused::Geometry>>& readers,
               size_t passes,
               bool shared) {
  Grad g;
  if (!x.defined() || (readers.empty() && !shared)) return g;
  g.by_pass.assign(passes, GradOut{});
  const int64_t rows = x.size(2);
  bool in_place = !shared && !readers.empty();
  for (const auto& r : readers) in_place = in_place && injective(r.second, rows);
  if (in_place) {
    g.buffer = covers(readers[0].second, rows)
                   ? torch::empty_like(x, torch::MemoryFormat::Contiguous)
                   : torch::zeros_like(x, torch::MemoryFormat::Contiguous);
  } else {
    g.buffer = torch::zeros(x.sizes(), x.options().dtype(acc_type(x.scalar_type())));
  }
  for (size_t i = 0; i < readers.size(); ++i) {
    GradOut& o = g.by_pass[readers[i].first];
    o.data = g.buffer.data_ptr();
    o.rows = rows;
    o.kind = in_place ? GradOut::kStore : GradOut::kAtomic;
    if (in_place && i > 0) {
      o.addend = g.buffer.data_ptr();
      o.addend_in_storage = true;
    }
  }
  return g;
}

class FusedFunction : public torch::autograd::Function<FusedFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& q_in,
                               const torch::Tensor& k_in,
                               const torch::Tensor& v_in,
                               const c10::optional<torch::Tensor>& ks_opt,
                               const c10::optional<torch::Tensor>& u_opt,
                               const std::vector<int64_t>& plan,
                               double scale) {
    // Summaries travel as optionals: an undefined tensor is no autograd input.
    const auto ks_in = ks_opt.value_or(torch::Tensor()), u_in = u_opt.value_or(torch::Tensor());
    const auto passes = decode(plan);
    const auto dtype = q_in.scalar_type();
    auto q = kernel_ready(q_in, dtype), k = kernel_ready(k_in, dtype),
         v = kernel_ready(v_in, dtype), ks = kernel_ready(ks_in, dtype),
         u = kernel_ready(u_in, dtype);
    const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);
    auto o = torch::empty({B, H, Lq, D}, q.options());
    auto lse = torch::empty({B, H, Lq}, q.options().dtype(acc_type(dtype)));
    for (size_t i = 0; i < passes.size(); ++i) {
      fused::Forward f;
      f.pass = make_pass(passes[i], q, k, v, ks, u, scale);
      f.o = o.data_ptr();
      f.lse = lse.data_ptr();
      f.merge = i > 0;
      run(q, f, &fused::forward_cpu, kForwardCuda);
    }
    ctx->save_for_backward({q, k, v, ks, u, o, lse});
    ctx->saved_data["plan"] = plan;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dtypes"] =
        std::vector<int64_t>{int64_t(k_in.scalar_type()),
                             int64_t(v_in.scalar_type()),
                             int64_t(ks_in.defined() ? ks_in.scalar_type() : dtype),
                             int64_t(u_in.defined() ? u_in.scalar_type() : dtype)};
    return o;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &ks = saved[3], &u = saved[4],
               &o = saved[5], &lse = saved[6];
    const auto passes = decode(ctx->saved_data["plan"].toIntVector());
    const double scale = ctx->saved_data["scale"].toDouble();
    const auto dtypes = ctx->saved_data["dtypes"].toIntVector();
    if (!grads[0].defined()) return {{}, {}, {}, {}, {}, {}, {}};
    const auto d_o = kernel_ready(grads[0], q.scalar_type());
    const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3);

    auto delta = torch::empty_like(lse);
    fused::Delta dl;
    dl.batch = B;
    dl.heads = H;
    dl.rows = Lq;
    dl.dim = D;
    dl.dtype = kernel_dtype(q.scalar_type());
    dl.o = operand(o);
    dl.d_o = operand(d_o);
    dl.delta = delta.data_ptr();
    run(q, dl, &fused::delta_cpu, kDeltaCuda);

    std::vector<std::pair<size_t, fused::Geometry>> q_uses, k_uses, v_uses, ks_uses, u_uses;
    bool summaries = false;
    for (size_t i = 0; i < passes.size(); ++i) {
      const auto& p = passes[i];
      q_uses.emplace_back(i, p.query);
      (p.a_from_summaries ? ks_uses : k_uses).emplace_back(i, p.key);
      (p.a_from_summaries ? u_uses : v_uses).emplace_back(i, p.value);
      summaries = summaries || p.summaries;
    }
    const size_t n = passes.size();
    Grad dq = slot_grad(q, q_uses, n, false), dk = slot_grad(k, k_uses, n, false),
         dv = slot_grad(v, v_uses, n, false), dks = slot_grad(ks, ks_uses, n, summaries),
         du = slot_grad(u, u_uses, n, summaries);
    for (size_t i = 0; i < passes.size(); ++i) {
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
        bw.dk = {slabs.data_ptr(), GradOut::kStoreAcc, slabs.size(2), nullptr, key.limit};
      }
      if (passes[i].summaries) {
        bw.dks = dks.summary_out();
        bw.du = du.summary_out();
      }
      run(q, bw, &fused::backward_cpu, kBackwardCuda);
      if (slabs.defined()) {
        key_grad.buffer.narrow(2, 0, key.limit)
            .add_(slabs.view({B, H, key.segments, key.limit, D}).sum(2));
      }
    }
    auto as = [&](const Grad& g, int64_t type) {
      return g.buffer.defined() ? g.buffer.to(torch::ScalarType(type)) : torch::Tensor();
    };
    return {as(dq, int64_t(q.scalar_type())),
            as(dk, dtypes[0]),
            as(dv, dtypes[1]),
            as(dks, dtypes[2]),
            as(du, dtypes[3]),
            {},
            {}};
  }
};

}  // namespace fused_glue

torch::Tensor fused_attention(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v,
                              const torch::Tensor& ks,
                              const torch::Tensor& u,
                              const std::vector<FusedPass>& passes,
                              double scale) {
  TORCH_CHECK(
      q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
          q.sizes().slice(0, 2) == k.sizes().slice(0, 2) &&
          k.sizes().slice(0, 3) == v.sizes().slice(0, 3) && q.size(3) == k.size(3),
      "fused attention: expected q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], got q ",
      q.sizes(),
      ", k ",
      k.sizes(),
      ", v ",
      v.sizes());
  TORCH_CHECK(q.size(3) == v.size(3),
              "fused attention: needs D == Dv, got q ",
              q.sizes(),
              " and v ",
              v.sizes());
  fused_glue::check_operands(q, k, v, ks, u, passes);
  auto optional = [](const torch::Tensor& x) {
    return x.defined() ? c10::optional<torch::Tensor>(x) : c10::nullopt;
  };
  return fused_glue::FusedFunction::apply(
      q, k, v, optional(ks), optional(u), fused_glue::encode(passes), scale);
}

std::vector<FusedPass> fixed_joint_passes(int64_t length, int64_t block) {
  const int64_t n = (length + block - 1) / block;
  FusedPass joint;
  joint.query = joint.key = joint.value = {n, block, block, 1, length};
  joint.mask = fused::Mask::kCausal;
  joint.summaries = n > 1;
  return {joint};
}

torch::Tensor fused_combiner_fixed(const torch::Tensor& q,
                                   const torch::Tensor& k,
                                   const torch::Tensor& v,
                                   const SpanSummary& summary,
                                   int64_t block) {
  check_inputs(q, k, v);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), s = block;
  const int64_t spans = (L + s - 1) / s - 1;  // every block but the last is a span
  const double scale = score_scale(D);
  torch::Tensor ks, u;
  if (spans > 0) {
    // The summaries as the composition computes them, in its compute dtype (DeepSets maps and
    // max pools in bfloat16 would flip arg-maxes at bfloat16's resolution), rounded to the
    // kernels' dtype once (where x's own dtype gives the same bits, x's blocks themselves).
    auto blocks = [&](const torch::Tensor& x, bool exact) {
      auto b = x.narrow(2, 0, spans * s).reshape({B, H, spans, s, x.size(3)});
      return exact ? b : b.to(compute_dtype(x));
    };
    auto q_span = summary.pool(summary.phi_query(blocks(q, summary.exact_in_input_dtype(true))), 3)
                      .to(q.scalar_type());
    ks = summary.pool(summary.phi_key(blocks(k, summary.exact_in_input_dtype(false))), 3)
             .to(k.scalar_type());  // [B, H, spans, D]
    // u: the pooled query's unmasked softmax over its own block.
    FusedPass local;
    local.query = {spans, 1, 1, 1, spans};
    local.key = local.value = {spans, s, s, 1, spans * s};
    local.mask = fused::Mask::kNone;
    auto head = [&](const torch::Tensor& x) { return x.narrow(2, 0, spans * s); };
    u = fused_attention(q_span, head(k), head(v), {}, {}, {local}, scale);
  }
  return fused_attention(q, k, v, ks, u, fixed_joint_passes(L, s), scale);
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

bool AttentionImpl::use_fused(const std::string& variant,
                              const torch::Tensor& q,
                              const torch::Tensor& v) const {
  if (path_ != Path::kAuto) return path_ == Path::kFused;
  const auto why = fused_cuda_unavailable(q, v);
  log_attention_path(variant, why.empty(), why);
  return why.empty();
}

void log_attention_path(const std::string& variant, bool fused, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::string line =
      variant + ": " + (fused ? "fused CUDA kernels" : "LibTorch path (" + why + ")");
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(line).second) spdlog::info("attention {}", line);
}

}  // namespace combiner::attention
