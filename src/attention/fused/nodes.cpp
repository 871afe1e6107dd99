// The fused family's autograd nodes and entry points (fused.h): a node runs one or two calls
// (function.cpp forward_call, backward.cpp backward_call), keeping their records in its context.
//  - FusedFunction: one call (fused_call, fused_attention, fused_attention_with_local).
//  - MeanFunction: the mean of two calls over the same q, k, v (fused_mean: combiner-mixture's
//    average of vertical and horizontal). Two nodes and an average would cost, besides the
//    calls, the sum of the two outputs, its halving and its backward's, and three sums of two
//    gradients of q, k and v (each a tensor of their size); here the second call's last pass
//    stores the mean, each call's backward takes its half of d_o where it writes its gradients,
//    and the second's adds into the first's gradients in place.
#include "attention/fused/checks.h"
#include "attention/fused/function.h"
#include "attention/fused/pool_stage.h"

#include <torch/csrc/autograd/graph_task.h>

#include <string>
#include <utility>
#include <vector>

namespace combiner::attention {

namespace fused_glue {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The released calls' o and lse (tensors 5 and 6) go to saved_data, whose entries backward can
// erase, rather than to save_for_backward. (The node's output cannot: saved_data would hold it
// and with it, through its grad_fn, the node.)
void save_calls(AutogradContext* ctx, const std::vector<CallRecord>& calls, size_t released) {
  std::vector<torch::Tensor> tensors;
  for (size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    const auto key = [&](const char* name) { return name + std::to_string(i); };
    tensors.insert(tensors.end(), c.tensors.begin(), c.tensors.end());
    if (i < released) {
      ctx->saved_data[key("o")] = c.tensors[5];
      ctx->saved_data[key("lse")] = c.tensors[6];
      tensors.end()[-4] = tensors.end()[-3] = torch::Tensor();
    }
    ctx->saved_data[key("plan")] = c.plan.passes;
    ctx->saved_data[key("local")] = c.plan.local;
    ctx->saved_data[key("pools")] = c.plan.pools;
    ctx->saved_data[key("scale")] = c.plan.scale;
    ctx->saved_data[key("dtypes")] = c.dtypes;
    ctx->saved_data[key("packed")] = c.packed;
    ctx->saved_data[key("mean")] = c.mean;
  }
  ctx->saved_data["calls"] = int64_t(calls.size());
  ctx->save_for_backward(tensors);
}

std::vector<CallRecord> saved_calls(AutogradContext* ctx) {
  const auto tensors = ctx->get_saved_variables();
  std::vector<CallRecord> calls(ctx->saved_data["calls"].toInt());
  for (size_t i = 0; i < calls.size(); ++i) {
    auto& c = calls[i];
    const auto key = [&](const char* name) { return name + std::to_string(i); };
    const auto first = tensors.begin() + int64_t(i * CallRecord::kTensors);
    c.tensors.assign(first, first + CallRecord::kTensors);
    if (ctx->saved_data.count(key("o"))) {
      c.tensors[5] = ctx->saved_data[key("o")].toTensor();
      c.tensors[6] = ctx->saved_data[key("lse")].toTensor();
    }
    c.plan = {ctx->saved_data[key("plan")].toIntVector(),
              ctx->saved_data[key("local")].toIntVector(),
              ctx->saved_data[key("pools")].toIntVector(),
              ctx->saved_data[key("scale")].toDouble()};
    c.dtypes = ctx->saved_data[key("dtypes")].toIntVector();
    c.packed = ctx->saved_data[key("packed")].toBool();
    c.mean = ctx->saved_data[key("mean")].toBool();
  }
  return calls;
}

CallRecord take_call(AutogradContext* ctx, std::vector<CallRecord>& calls, size_t i) {
  if (!torch::autograd::get_current_graph_task_keep_graph())
    for (const char* name : {"o", "lse"}) ctx->saved_data.erase(name + std::to_string(i));
  return std::exchange(calls[i], CallRecord());
}

torch::Tensor FusedFunction::forward(AutogradContext* ctx,
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
  CallRecord record;
  const auto o = forward_call(q_in,
                              k_in,
                              v_in,
                              ks_opt.value_or(torch::Tensor()),
                              u_opt.value_or(torch::Tensor()),
                              qs_opt.value_or(torch::Tensor()),
                              {plan, local_plan, pool_plan, scale},
                              record);
  save_calls(ctx, {record});
  return o;
}

tensor_list FusedFunction::backward(AutogradContext* ctx, tensor_list grads) {
  if (!grads[0].defined()) return tensor_list(10);
  const auto g = backward_call(saved_calls(ctx)[0], grads[0]);
  return {g[0], g[1], g[2], g[3], g[4], g[5], {}, {}, {}, {}};
}

CallPlan plan_of(const FusedCall& call) {
  return {encode(call.passes), encode(call.local), fused_pools::encode(call.pools), call.scale};
}

namespace {
class MeanFunction : public torch::autograd::Function<MeanFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx,
                               const torch::Tensor& q,
                               const torch::Tensor& k,
                               const torch::Tensor& v,
                               const c10::optional<torch::Tensor>& ks_a,
                               const c10::optional<torch::Tensor>& u_a,
                               const c10::optional<torch::Tensor>& qs_a,
                               const c10::optional<torch::Tensor>& ks_b,
                               const c10::optional<torch::Tensor>& u_b,
                               const c10::optional<torch::Tensor>& qs_b,
                               const std::vector<int64_t>& passes_a,
                               const std::vector<int64_t>& local_a,
                               const std::vector<int64_t>& pools_a,
                               const std::vector<int64_t>& passes_b,
                               const std::vector<int64_t>& local_b,
                               const std::vector<int64_t>& pools_b,
                               double scale) {
    const auto given = [](const c10::optional<torch::Tensor>& x) {
      return x.value_or(torch::Tensor());
    };
    std::vector<CallRecord> calls(2);
    const auto o_a = forward_call(q,
                                  k,
                                  v,
                                  given(ks_a),
                                  given(u_a),
                                  given(qs_a),
                                  {passes_a, local_a, pools_a, scale},
                                  calls[0]);
    // (o_a + o_b) / 2 stored by the second call's last pass where it can (CallRecord::mean: o_b
    // is then never in memory), else by one kernel, laid out as o_a (the heads' merge stays a
    // view either way).
    const auto o_b = forward_call(q,
                                  k,
                                  v,
                                  given(ks_b),
                                  given(u_b),
                                  given(qs_b),
                                  {passes_b, local_b, pools_b, scale},
                                  calls[1],
                                  o_a);
    // o_a is the node's own, and o_b too where it is not the mean: backward lets go of each
    // once its call's backward has made its delta.
    save_calls(ctx, calls, /*released=*/calls[1].mean ? 1 : 2);
    return calls[1].mean ? o_b : at::lerp(o_a, o_b, 0.5);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    constexpr size_t kInputs = 16;
    if (!grads[0].defined()) return tensor_list(kInputs);
    auto calls = saved_calls(ctx);
    // Each call's share is half of d_o: halved where its joint passes write their gradients
    // (exact: a power of two), with no halved copy of d_o.
    const auto d_o = kernel_ready(grads[0], calls[0].tensors[0].scalar_type());
    // Where the second call kept the mean for its o, its delta is made from the mean and the
    // first call's (fused::Delta::other_delta).
    torch::Tensor delta_a;
    // The first call's o (24 MiB at L 3072, B 8 x 8, D 64 in bf16), and the second's where it is
    // not the mean, are let go of once their deltas are made: not live beside the summaries each
    // call's backward makes again.
    const bool mean = calls[1].mean;
    const auto a = backward_call(
        take_call(ctx, calls, 0), d_o, {{}, 0.5, {}, mean ? &delta_a : nullptr, /*o_alone=*/true});
    const auto b = backward_call(
        take_call(ctx, calls, 1), d_o, {{a[0], a[1], a[2]}, 0.5, delta_a, nullptr, !mean});
    tensor_list out = {b[0], b[1], b[2], a[3], a[4], a[5], b[3], b[4], b[5]};
    out.resize(kInputs);
    return out;
  }
};

}  // namespace

}  // namespace fused_glue

namespace {
c10::optional<torch::Tensor> optional(const torch::Tensor& x) {
  return x.defined() ? c10::optional<torch::Tensor>(x) : c10::nullopt;
}
}  // namespace

torch::Tensor fused_call(const torch::Tensor& q,
                         const torch::Tensor& k,
                         const torch::Tensor& v,
                         const FusedCall& call) {
  fused_glue::check_call(q, k, v, call);
  const auto plan = fused_glue::plan_of(call);
  return fused_glue::FusedFunction::apply(q,
                                          k,
                                          v,
                                          optional(call.ks),
                                          optional(call.u),
                                          optional(call.qs),
                                          plan.passes,
                                          plan.local,
                                          plan.pools,
                                          plan.scale);
}

torch::Tensor fused_attention(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v,
                              const torch::Tensor& ks,
                              const torch::Tensor& u,
                              const std::vector<FusedPass>& passes,
                              double scale) {
  FusedCall call;
  call.ks = ks;
  call.u = u;
  call.passes = passes;
  call.scale = scale;
  return fused_call(q, k, v, call);
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
  TORCH_CHECK(!local.empty(), "fused attention: a local stage needs at least one pass");
  FusedCall call;
  call.ks = ks;
  call.qs = qs;
  call.local = local;
  call.passes = passes;
  call.pools = pools;
  call.scale = scale;
  return fused_call(q, k, v, call);
}

torch::Tensor fused_mean(const torch::Tensor& q,
                         const torch::Tensor& k,
                         const torch::Tensor& v,
                         const FusedCall& a,
                         const FusedCall& b) {
  fused_glue::check_call(q, k, v, a);
  fused_glue::check_call(q, k, v, b);
  TORCH_CHECK(a.scale == b.scale,
              "fused attention: the mean of two calls takes one score scale, got ",
              a.scale,
              " and ",
              b.scale);
  const auto pa = fused_glue::plan_of(a), pb = fused_glue::plan_of(b);
  return fused_glue::MeanFunction::apply(q,
                                         k,
                                         v,
                                         optional(a.ks),
                                         optional(a.u),
                                         optional(a.qs),
                                         optional(b.ks),
                                         optional(b.u),
                                         optional(b.qs),
                                         pa.passes,
                                         pa.local,
                                         pa.pools,
                                         pb.passes,
                                         pb.local,
                                         pb.pools,
                                         a.scale);
}

}  // namespace combiner::attention
