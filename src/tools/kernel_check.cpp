// Each case runs one module three ways on the same inputs (the fused path, the LibTorch
// composition in the same dtype, the composition in float64) plus the dense float64 matrix A of
// reference.h, and the joint pass alone with random summaries against its LibTorch composition;
// then the fused path again on q, k and v as views of one packed projection (split_heads), whose
// gradient the kernels write in that layout, against the first fused run.
#include "tools/kernel_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "attention/attention.h"
#include "attention/axial_common.h"
#include "attention/fused/fused.h"
#include "attention/heads.h"
#include "attention/reference.h"
#include "attention/span_ops.h"

namespace combiner::attention {

const std::vector<std::string>& fused_variants() {
  static const std::vector<std::string> names = {"combiner-fixed",
                                                 "combiner-axial-rowmajor",
                                                 "combiner-axial-vertical",
                                                 "combiner-axial-horizontal",
                                                 "combiner-mixture"};
  return names;
}

double check_error(const torch::Tensor& got, const torch::Tensor& want) {
  if (!got.defined() && !want.defined()) return 0;
  if (!got.defined() || !want.defined()) return INFINITY;
  auto g = got.detach().to(torch::kCPU, torch::kDouble),
       w = want.detach().to(torch::kCPU, torch::kDouble);
  if (g.numel() == 0) return 0;
  const double scale = std::max(1.0, w.abs().max().item<double>());
  const double e = (g - w).abs().max().item<double>() / scale;
  return std::isfinite(e) ? e : INFINITY;
}

namespace kernel_check_detail {

struct Run {
  torch::Tensor out, dq, dk, dv, dparams;
};

// Forward and backward (out . d_o) of a module on its own copies of the inputs.
Run run(AttentionImpl& module,
        AttentionImpl::Path path,
        const torch::Tensor& q,
        const torch::Tensor& k,
        const torch::Tensor& v,
        const torch::Tensor& d_o) {
  Run r;
  auto qq = q.detach().clone().requires_grad_(), kk = k.detach().clone().requires_grad_(),
       vv = v.detach().clone().requires_grad_();
  module.zero_grad();
  module.set_path(path);
  r.out = module.forward(qq, kk, vv);
  r.out.backward(d_o.to(r.out.scalar_type()));
  r.dq = qq.grad();
  r.dk = kk.grad();
  r.dv = vv.grad();
  std::vector<torch::Tensor> params;
  for (const auto& p : module.parameters())  // unused maps (one block only) have no gradient
    params.push_back(p.grad().defined() ? p.grad().flatten() : torch::zeros_like(p).flatten());
  if (!params.empty()) r.dparams = torch::cat(params);
  return r;
}

// The fused path on q, k, v as split_heads' views of one [B, L, 3 H D] projection: its output
// and the projection's gradient (dq, dk, dv written by the kernels as the parts of one packed
// tensor, strided) against `fused`, the same call on contiguous copies.
double packed_error(AttentionImpl& module,
                    const Run& fused,
                    const torch::Tensor& q,
                    const torch::Tensor& k,
                    const torch::Tensor& v,
                    const torch::Tensor& d_o) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3);
  auto qkv = torch::stack({q, k, v}, 2)  // [B, H, 3, L, D]
                 .permute({0, 3, 2, 1, 4})
                 .contiguous()
                 .view({B, L, 3 * H * D})
                 .requires_grad_();
  const auto heads = split_heads(qkv, H);
  module.zero_grad();
  module.set_path(AttentionImpl::Path::kFused);
  const auto out = module.forward(heads[0], heads[1], heads[2]);
  out.backward(d_o.to(out.scalar_type()));
  const auto g = qkv.grad().view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
  return std::max({check_error(out, fused.out),
                   check_error(g[0], fused.dq),
                   check_error(g[1], fused.dk),
                   check_error(g[2], fused.dv)});
}

// A variant's joint passes and their reference, and its summary rows (ks, u) per span.
struct Joint {
  std::vector<FusedPass> (*passes)(int64_t, int64_t);
  torch::Tensor (*reference)(const torch::Tensor&,
                             const torch::Tensor&,
                             const torch::Tensor&,
                             const torch::Tensor&,
                             const torch::Tensor&,
                             int64_t);
  int64_t ks_rows, u_rows;  // per span, in units of 1 or of the layout (W)
};

Joint joint_of(const std::string& variant) {
  if (variant == "combiner-fixed") return {fixed_joint_passes, joint_fixed_reference, 0, 0};
  if (variant == "combiner-axial-rowmajor")
    return {rowmajor_joint_passes, joint_rowmajor_reference, 0, 1};
  if (variant == "combiner-axial-vertical")
    return {vertical_joint_passes, joint_vertical_reference, 1, 1};
  return {horizontal_joint_passes, joint_horizontal_reference, 2, 2};
}

// The joint passes alone with random summaries: max error over o, dq, dk, dv, d ks, d u (the
// mixture: both of its plans').
double joint_error(const KernelCheckCase& c,
                   const torch::Tensor& q,
                   const torch::Tensor& k,
                   const torch::Tensor& v,
                   const torch::Tensor& d_o) {
  if (c.variant == "combiner-mixture") {
    auto plan = c;
    double worst = 0;
    for (const auto* name : {"combiner-axial-vertical", "combiner-axial-horizontal"}) {
      plan.variant = name;
      worst = std::max(worst, joint_error(plan, q, k, v, d_o));
    }
    return worst;
  }
  const Joint joint = joint_of(c.variant);
  const int64_t L = q.size(2), s = c.layout, spans = (L + s - 1) / s - 1;
  if (spans <= 0) return 0;
  auto rows = [&](int64_t per) { return per == 0 ? spans : per * spans * s; };
  auto draw = [&](int64_t n) {
    return torch::randn({c.batch, c.heads, n, c.dim}, q.options().dtype(torch::kDouble))
        .to(q.scalar_type());
  };
  auto ks = draw(rows(joint.ks_rows)), u = draw(rows(joint.u_rows));
  std::vector<torch::Tensor> fused_grads, ref_grads;
  for (bool reference : {false, true}) {
    auto as = [&](const torch::Tensor& x) {
      return (reference ? x.to(torch::kDouble) : x).detach().clone().requires_grad_();
    };
    std::vector<torch::Tensor> in = {as(q), as(k), as(v), as(ks), as(u)};
    torch::Tensor o;
    if (reference) {
      o = joint.reference(in[0], in[1], in[2], in[3], in[4], s);
    } else {
      o = fused_attention(
          in[0], in[1], in[2], in[3], in[4], joint.passes(L, s), score_scale(c.dim));
    }
    o.backward(d_o.to(o.scalar_type()));
    auto& grads = reference ? ref_grads : fused_grads;
    grads.push_back(o);
    for (const auto& x : in) grads.push_back(x.grad());
  }
  double worst = 0;
  for (size_t i = 0; i < fused_grads.size(); ++i)
    worst = std::max(worst, check_error(fused_grads[i], ref_grads[i]));
  return worst;
}

}  // namespace kernel_check_detail

std::vector<KernelCheckCase> kernel_check_cases(const std::string& device,
                                                const std::vector<int64_t>& dims,
                                                KernelCheckSizes sizes) {
  const bool cuda = torch::Device(device).is_cuda();
  // The CPU model runs bfloat16 too (float32 arithmetic on bfloat16 operands and stores): the
  // glue's bfloat16 paths (summaries in the compute dtype, Acc gradient buffers) without a GPU.
  const std::vector<std::string> dtypes =
      cuda ? std::vector<std::string>{"float32", "bfloat16"}
           : std::vector<std::string>{"float32", "float64", "bfloat16"};
  // {length, input length, layout}: a short last block (200 = 8 * 24 + 8); blocks of 96 > one
  // 64-row tile with a short last one; a short last row (163 of 7 rows of 24); rows of 96.
  // Then the large-n paths: 1600 / 24 has 66 summaries (a second 64-row summary tile) whose
  // gradients come from two parts of 43 blocks each (several CTAs adding into the same rows);
  // 1584 / 24 has columns of 66 queries over 65 summaries under the strict mask (a second query
  // chunk and a second key tile, the second chunk's walk starting past f = 0) in two parts.
  // The vertical, horizontal and mixture rows take the rowmajor shapes: rows of 96 are two key
  // tiles for vertical's spans (source B of its row pass, mask c != c', every query tile sees
  // every key tile) and 1584 / 24 gives columns of 66 queries to the column pass (with the
  // prefixes as its source B) and the suffix pass. 768 / 24 gives columns of 32 queries over 31
  // or 32 keys, as CIFAR-10's rows of 96 do: two columns share each tile (kernel_index.h
  // segment_pack), whose 64 queries are two of the key-side walk's tiles at D 128. 1152 / 72:
  // vertical's rows longer than a tile and columns of 16, as CIFAR-10's rows of 96 and columns of
  // 32 are, so that the backward's first launch is its local pass remade, which makes o's delta
  // by CTAs of its own (kernel_pass.h Forward::delta). Blocks and rows of 48 (one key tile,
  // unpacked): the local pass makes the key maxes in its CTAs and takes their backward there
  // (kernel_pass.h Forward::key_pool, Backward::key_pool): those take the max abstraction (its
  // pools are the call's own), the others each abstraction in turn.
  struct Layout {
    std::string variant;
    std::vector<int64_t> l;
    std::string abstraction;  // empty: the rotation's
  };
  std::vector<Layout> layouts = {{"combiner-fixed", {200, 200, 24}, ""},
                                 {"combiner-fixed", {300, 300, 96}, ""},
                                 {"combiner-fixed", {240, 230, 48}, "max"},
                                 {"combiner-axial-rowmajor", {168, 163, 24}, ""},
                                 {"combiner-axial-rowmajor", {288, 288, 96}, ""},
                                 {"combiner-axial-rowmajor", {288, 283, 48}, "max"},
                                 {"combiner-axial-vertical", {168, 163, 24}, ""},
                                 {"combiner-axial-vertical", {288, 288, 96}, ""},
                                 {"combiner-axial-horizontal", {168, 163, 24}, ""},
                                 {"combiner-axial-horizontal", {288, 288, 96}, ""},
                                 {"combiner-mixture", {168, 150, 24}, ""}};
  if (sizes != KernelCheckSizes::kSmall) {
    layouts.push_back({"combiner-fixed", {1600, 1600, 24}, ""});
    layouts.push_back({"combiner-axial-rowmajor", {1584, 1584, 24}, ""});
    layouts.push_back({"combiner-axial-vertical", {1584, 1584, 24}, ""});
    layouts.push_back({"combiner-axial-horizontal", {1584, 1584, 24}, ""});
    for (const char* variant :
         {"combiner-axial-rowmajor", "combiner-axial-vertical", "combiner-axial-horizontal"})
      layouts.push_back({variant, {768, 768, 24}, ""});
    layouts.push_back({"combiner-axial-vertical", {1152, 1152, 72}, ""});
  }
  const auto& abstractions = abstraction_names();
  std::vector<KernelCheckCase> out;
  for (const auto& dtype : dtypes)
    for (int64_t dim : dims)
      for (const auto& [variant, l, abstraction] : layouts) {
        KernelCheckCase c;
        c.variant = variant;
        // Each layout meets every abstraction: the rotation shifts by one per (dtype, D) block.
        const size_t i = out.size(), per = layouts.size();
        c.abstraction = abstraction.empty()
                            ? abstractions[(i % per + i / per) % abstractions.size()]
                            : abstraction;
        c.dtype = dtype;
        c.dim = dim;
        c.length = l[0];
        c.input_length = l[1];
        c.layout = l[2];
        out.push_back(c);
      }
  return out;
}

KernelCheckResult run_kernel_check(const KernelCheckCase& c, const std::string& device) {
  using namespace kernel_check_detail;
  KernelCheckResult r;
  const bool bf16 = c.dtype == "bfloat16", f64 = c.dtype == "float64";
  r.tol_out = f64 ? 1e-10 : bf16 ? 2e-2 : 1e-4;
  r.tol_grad = f64 ? 1e-9 : bf16 ? 5e-2 : 1e-3;
  try {
    const torch::Device dev(device);
    const auto dtype = bf16 ? torch::kBFloat16 : f64 ? torch::kDouble : torch::kFloat;
    const AttentionOptions o{c.variant, c.layout, c.layout, c.abstraction};
    const int64_t seed = c.dim * 1000 + c.length + (bf16 ? 7 : 0);
    auto make = [&](torch::ScalarType type) {
      torch::manual_seed(seed);  // the same DeepSets maps each time
      auto m = make_attention(o, c.length, c.dim);
      m->to(dev, type);
      return m;
    };
    auto module = make(f64 ? torch::kDouble : torch::kFloat), exact = make(torch::kDouble);
    torch::manual_seed(seed + 1);
    const std::vector<int64_t> full = {c.batch, c.heads, c.length, c.dim};
    // The inputs, rounded to the checked dtype once; every reference reads the rounded values.
    auto draw = [&] { return torch::randn(full, torch::kDouble).to(dtype).to(torch::kDouble); };
    auto qf = draw(), kf = draw(), vf = draw(), d_o = torch::randn(full, torch::kDouble);
    const int64_t Lin = c.input_length;
    auto head = [&](const torch::Tensor& x, torch::ScalarType type) {
      return x.narrow(2, 0, Lin).to(dev, type).contiguous();
    };
    d_o.narrow(2, Lin, c.length - Lin).zero_();  // positions past the inputs get no gradient
    auto composed = run(*module,
                        AttentionImpl::Path::kComposed,
                        head(qf, dtype),
                        head(kf, dtype),
                        head(vf, dtype),
                        head(d_o, dtype));
    auto precise = run(*exact,
                       AttentionImpl::Path::kComposed,
                       head(qf, torch::kDouble),
                       head(kf, torch::kDouble),
                       head(vf, torch::kDouble),
                       head(d_o, torch::kDouble));
    r.grad_composed = std::max({check_error(composed.dq, precise.dq),
                                check_error(composed.dk, precise.dk),
                                check_error(composed.dv, precise.dv),
                                check_error(composed.dparams, precise.dparams)});
    auto fused = run(*module,
                     AttentionImpl::Path::kFused,
                     head(qf, dtype),
                     head(kf, dtype),
                     head(vf, dtype),
                     head(d_o, dtype));
    // The dense A over the whole module length; outputs before Lin depend on nothing after it.
    auto maps = deepsets_maps(*module);
    for (auto* w : {&maps.query, &maps.key})
      if (w->defined()) *w = w->cpu();
    auto a = effective_matrix(o, qf, kf, maps);
    auto ref_out = torch::matmul(a, vf).narrow(2, 0, Lin);
    auto ref_dv = torch::matmul(a.transpose(-2, -1), d_o).narrow(2, 0, Lin);
    r.out_composed = check_error(fused.out, composed.out);
    r.out_reference = check_error(fused.out, ref_out);
    r.grad_q = check_error(fused.dq, precise.dq);
    r.grad_k = check_error(fused.dk, precise.dk);
    r.grad_v = std::max(check_error(fused.dv, ref_dv), check_error(fused.dv, precise.dv));
    r.grad_params = check_error(fused.dparams, precise.dparams);
    r.grad_summary =
        joint_error(c, head(qf, dtype), head(kf, dtype), head(vf, dtype), head(d_o, dtype));
    r.packed = packed_error(
        *module, fused, head(qf, dtype), head(kf, dtype), head(vf, dtype), head(d_o, dtype));
    r.pass = r.out_composed <= r.tol_out && r.out_reference <= r.tol_out &&
             std::max({r.grad_q, r.grad_k, r.grad_v, r.grad_params, r.grad_summary, r.packed}) <=
                 r.tol_grad;
  } catch (const std::exception& e) {
    r.pass = false;
    r.detail = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
  }
  return r;
}

std::string fused_mismatch(const std::string& variant,
                           const std::string& device,
                           const std::string& dtype,
                           int64_t dim) {
  if (!torch::Device(device).is_cuda() || !torch::cuda::is_available()) return "";
  const auto probe = torch::empty(
      {1, 1, 1, dim},
      torch::TensorOptions().device(device).dtype(dtype == "bfloat16"  ? torch::kBFloat16
                                                  : dtype == "float64" ? torch::kDouble
                                                                       : torch::kFloat));
  if (!fused_cuda_unavailable(probe, probe).empty()) return "";
  for (const auto& c : kernel_check_cases(device, {dim}, KernelCheckSizes::kSmall)) {
    if (c.variant != variant || c.dtype != dtype) continue;
    const auto r = run_kernel_check(c, device);
    if (!r.pass) return kernel_check_line(c, r);
  }
  return "";
}

std::string kernel_check_header() {
  char line[256];
  std::snprintf(line,
                sizeof line,
                "%-25s %-13s %-8s %4s %5s %4s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s  %s",
                "variant",
                "abstraction",
                "dtype",
                "D",
                "L",
                "s/W",
                "out:lib",
                "out:ref",
                "dq",
                "dk",
                "dv",
                "dphi",
                "joint",
                "packed",
                "grad:lib",
                "tol:out",
                "tol:grad",
                "result");
  return line;
}

std::string kernel_check_line(const KernelCheckCase& c, const KernelCheckResult& r) {
  char line[512];
  std::snprintf(line,
                sizeof line,
                "%-25s %-13s %-8s %4lld %5lld %4lld %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e %9.2e "
                "%9.2e %9.2e %9.1e %9.1e  %s",
                c.variant.c_str(),
                c.abstraction.c_str(),
                c.dtype.c_str(),
                (long long)c.dim,
                (long long)c.input_length,
                (long long)c.layout,
                r.out_composed,
                r.out_reference,
                r.grad_q,
                r.grad_k,
                r.grad_v,
                r.grad_params,
                r.grad_summary,
                r.packed,
                r.grad_composed,
                r.tol_out,
                r.tol_grad,
                r.pass ? "PASS" : "FAIL");
  return r.detail.empty() ? std::string(line) : std::string(line) + " (" + r.detail + ")";
}

}  // namespace combiner::attention
