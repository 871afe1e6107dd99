// A fused call's forward (function.cpp) and backward (backward.cpp), the glue they share (dtypes
// and strides as the kernels take them, the plan as integers, a pass over given tensors, the
// forward of a stage), and the autograd node of one call (nodes.cpp, with the mean of two).
#pragma once

#include <torch/torch.h>

#include "attention/fused/fused.h"

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace combiner::attention::fused_glue {

fused::Dtype kernel_dtype(torch::ScalarType t);
// The accumulation dtype: double for double, float otherwise.
torch::ScalarType acc_type(torch::ScalarType t);
// x in `dtype` with a contiguous last axis and 16-byte aligned rows (what cp.async needs).
torch::Tensor kernel_ready(const torch::Tensor& x, torch::ScalarType dtype);
fused::Operand operand(const torch::Tensor& x);

// The plan as integers (it travels in the autograd context), and back.
std::vector<int64_t> encode(const std::vector<FusedPass>& passes);
std::vector<FusedPass> decode(const std::vector<int64_t>& in);

// The kernels' pass: `fp` over q, k, v and the slots ks, u (undefined where it reads none).
fused::Pass make_pass(const FusedPass& fp,
                      const torch::Tensor& q,
                      const torch::Tensor& k,
                      const torch::Tensor& v,
                      const torch::Tensor& ks,
                      const torch::Tensor& u,
                      double scale);

// Writes into `buffer` ([B, H, rows, D], the last axis contiguous) in `kind`.
fused::GradOut grad_out(const torch::Tensor& buffer, fused::GradOut::Kind kind);

// delta = rowsum(o * d_o) per query row (the backward's D of FlashAttention), into `delta`
// ([B, H, rows], Acc, contiguous): the delta kernel's descriptor, for its launch or a forward's
// (fused::Forward::delta). `other_delta`, where defined: o is the mean of the call's output and
// another call's, whose delta this is, and the call's own is made (fused::Delta::other_delta).
fused::Delta delta_of(const torch::Tensor& o,
                      const torch::Tensor& d_o,
                      const torch::Tensor& delta,
                      const torch::Tensor& other_delta = {});
// The delta kernel's launch: a new [B, H, rows] tensor, like lse.
torch::Tensor row_delta(const torch::Tensor& o,
                        const torch::Tensor& d_o,
                        const torch::Tensor& lse,
                        const torch::Tensor& other_delta = {});

// The local stage: u [B, H, Lu, D] (and its lse) from its passes over their queries
// (local_queries) and k, v, each pass storing its own rows (rows no local query writes are
// zeros where a joint pass of `readers` reads them, else left as allocated); a pooled pass
// (FusedPass::pooled) also writes its keys' running max into ks. `with`, a joint pass's forward
// writing neither u nor ks, runs in the launch of the first local pass over its CTAs
// (fused::same_ctas, and pairable: fused::ForwardPair), else just before it, else last. `delta`,
// where its delta is set (the backward's, of the call's o), is made by the first local pass's
// launch, by CTAs of its own (fused::Forward::delta; not with `with`). A key-side segment max of
// `pools` made on chip is made by the local pass that fits it, into ks (fused::Forward::key_pool).
std::pair<torch::Tensor, torch::Tensor> local_stage(const std::vector<FusedPass>& local,
                                                    const torch::Tensor& q,
                                                    const torch::Tensor& qs,
                                                    const torch::Tensor& k,
                                                    const torch::Tensor& v,
                                                    const torch::Tensor& ks,
                                                    int64_t Lu,
                                                    const std::vector<FusedPass>& readers,
                                                    double scale,
                                                    const fused::Forward* with = nullptr,
                                                    const fused::Delta& delta = {},
                                                    const std::vector<FusedPool>& pools = {});
// A local pass's queries: q itself where it pools them on chip or no qs is given or made, else
// qs.
const torch::Tensor& local_queries(const FusedPass& local,
                                   const torch::Tensor& q,
                                   const torch::Tensor& qs);
// The local stage's rows, u's: qs's, or the query-side pools' (made on chip: no qs), or, where
// the local passes read q itself, the rows up to where their queries end (rowmajor: every row
// but the last row of the sequence, the rows a span summarises).
int64_t local_rows(const std::vector<FusedPass>& local,
                   const torch::Tensor& qs,
                   const std::vector<FusedPool>& pools);

// One call's plan as its autograd node carries it: the passes, local passes and pools as
// integers, and the score scale.
struct CallPlan {
  std::vector<int64_t> passes, local, pools;
  double scale = 1;
};

CallPlan plan_of(const FusedCall& call);

// What one call's backward reads, kept by its forward: q, k, v, ks, u, o, lse, qs, u's lse
// (undefined where there is none or where it is made again in backward), the plan, the input
// dtypes of k, v, ks, u, qs, whether q, k, v were the parts of one packed tensor, and whether o
// is the mean of the call's output and an earlier call's (forward_call's mean_with).
struct CallRecord {
  static constexpr size_t kTensors = 9;
  std::vector<torch::Tensor> tensors;
  CallPlan plan;
  std::vector<int64_t> dtypes;
  bool packed = false;
  bool mean = false;
};

// One call: optionally max pools making ks from k and qs from q, and a local stage making the
// summary values u from the summary queries qs (or q) and k, v; then the joint stage over
// (q, k, v, ks, u). Returns o and fills `record` (with cumulative pools,
// fused_pools::remade_in_backward, their slots and the local stage's u are not kept: backward
// makes them again, a summary group at a time: backward.cpp). With `mean_with` (an earlier
// call's o over the same q, k, v, laid out as this call's), it returns the mean of the two,
// stored by its last joint pass where that pass writes every row of o alone
// (fused::Forward::mean_with; record.mean: the record keeps the mean, not this call's o), else
// its own o.
torch::Tensor forward_call(const torch::Tensor& q_in,
                           const torch::Tensor& k_in,
                           const torch::Tensor& v_in,
                           const torch::Tensor& ks_in,
                           const torch::Tensor& u_in,
                           const torch::Tensor& qs_in,
                           const CallPlan& plan,
                           CallRecord& record,
                           const torch::Tensor& mean_with = {});
// How a call's backward takes its d_o, beside the call's own (the mean of two calls, nodes.cpp):
//  - into: the gradients of q, k and v so far (an earlier call's over the same q, k, v, in their
//    dtypes), which every pass adds its part into in place and which are returned;
//  - grad_scale: the gradients are those of grad_scale x d_o, scaled where the joint passes
//    write them (fused::Backward::grad_scale): no scaled copy of d_o;
//  - other_delta: where the record's o is a mean (CallRecord::mean), the earlier call's delta;
//  - delta: where not null, receives the call's delta of its o (for a later call's other_delta);
//  - o_alone: the record holds the call's o alone (the mean's first call: the caller moved its
//    record in and keeps no o), which its backward lets go of before a summary group's gradients
//    are made where a launch before them can make o's delta.
struct BackwardOptions {
  std::array<torch::Tensor, 3> into;
  double grad_scale = 1;
  torch::Tensor other_delta;
  torch::Tensor* delta = nullptr;
  bool o_alone = false;
};
// The backward of one call given d_o: the gradients of q, k, v, ks, u, qs (undefined where there
// is none). It runs the joint passes, then the local ones with u's gradient as their d_o, then
// the pools' backward; every pass and pool adds its part of dk, dv (and dq) in place. It lets go
// of the record's o once o's delta is made (a caller that moves its record in frees it there).
std::array<torch::Tensor, 6> backward_call(CallRecord record,
                                           const torch::Tensor& d_o,
                                           const BackwardOptions& options = {});
// The records of a node's calls, in its context and back (keys suffixed by the call's index). The
// first `released` calls' o and lse are the node's own (neither an input nor its output), which
// backward lets go of as soon as it can (take_call).
void save_calls(torch::autograd::AutogradContext* ctx,
                const std::vector<CallRecord>& calls,
                size_t released = 0);
std::vector<CallRecord> saved_calls(torch::autograd::AutogradContext* ctx);
// Call i's record taken out of `calls` for its backward, and its o and lse out of saved_data where
// save_calls put them there, unless the graph is kept for another backward (retain_graph).
CallRecord take_call(torch::autograd::AutogradContext* ctx,
                     std::vector<CallRecord>& calls,
                     size_t i);

// One call as an autograd node: forward_call, backward_call.
class FusedFunction : public torch::autograd::Function<FusedFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx,
                               const torch::Tensor& q_in,
                               const torch::Tensor& k_in,
                               const torch::Tensor& v_in,
                               const c10::optional<torch::Tensor>& ks_opt,
                               const c10::optional<torch::Tensor>& u_opt,
                               const c10::optional<torch::Tensor>& qs_opt,
                               const std::vector<int64_t>& plan,
                               const std::vector<int64_t>& local_plan,
                               const std::vector<int64_t>& pool_plan,
                               double scale);
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads);
};

}  // namespace combiner::attention::fused_glue
