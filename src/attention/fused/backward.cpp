// The backward of a fused call (function.h): the joint passes, then the local ones with u's
// gradient as their d_o, then the pools' backward; every pass and pool adds its part of dk, dv
// (and dq) in place. The summary slots (ks, qs, u) are read a summary group at a time
// (SummaryGroup); where the call made them from cumulative pools, and so did not keep them, each
// group's slots are made here just before its passes run and dropped after its pools' backward:
// at most one group's ks and u and their gradients are alive beside q, k, v, o and theirs
// (horizontal: its prefix and its suffix summaries, each half of the slots).
#include "attention/fused/backward_grad.h"
#include "attention/fused/backward_plan.h"
#include "attention/fused/function.h"

#include "attention/fused/checks.h"
#include "attention/fused/launch.h"
#include "attention/fused/pool_stage.h"
#include "attention/heads.h"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>
#include <vector>

namespace combiner::attention::fused_glue {

using fused::GradOut;

namespace {

// Whether a group's query side is segment maxes alone (fixed's pooled queries: a row a block).
bool query_side_is_segment_maxes(const SummaryGroup& group) {
  bool any = false;
  for (const auto& p : group.pools) {
    if (!p.query_side) continue;
    if (p.kind != FusedPool::Kind::kSegmentMax) return false;
    any = true;
  }
  return any;
}

// Whether a group's local passes, over `rows` rows of its qs, store every row once, so that qs's
// gradient can be written over u's (the local passes' d_o): each pass reads a row's d_o before it
// writes that row's dq (kernel_pass.h, Backward). Where its query side's pools read only some
// rows of that gradient (FusedPool::read_steps), every row once at most and each of those once.
// Not where that gradient is a few rows (segment maxes alone) at D `dim` 128, where a local
// pass's dk/dv walk and dq share a launch unless its dq is stored over its d_o
// (fused::interleaved_backward): those rows get a buffer of their own, for the one launch.
bool stores_qs_over_du(const SummaryGroup& group, int64_t rows, int64_t dim) {
  if (rows == 0 || group.local.empty()) return false;
  if (fused::interleaved_backward_built(dim) && query_side_is_segment_maxes(group)) return false;
  const auto writes = local_writes(group.local, rows);
  const auto read = read_in_backward(group.pools, /*query_side=*/true);
  bool ok = true;
  if (read.empty()) {
    for (const int64_t w : writes) ok = ok && w == 1;
  } else {
    const auto named = named_rows_of(read, rows);
    for (int64_t r = 0; r < rows; ++r) ok = ok && writes[r] <= 1 && (!named[r] || writes[r] == 1);
  }
  return ok;
}

// The steps whose gradients land in each slot: q, k and v's, and each group's ks, u and qs.
struct StepReaders {
  Readers q, k, v;
  std::vector<Readers> ks, u, qs;  // by group
  std::vector<char> by_prefix;     // a pass reads the group's summaries by prefix
};
// `dqs_over_du`: by group, stores_qs_over_du (its local passes' query gradient has no reader of
// its own); `local_q`: the local passes read q itself.
StepReaders readers_of(const std::vector<Step>& steps,
                       size_t groups,
                       const std::vector<char>& dqs_over_du,
                       bool local_q) {
  StepReaders r;
  r.ks.resize(groups);
  r.u.resize(groups);
  r.qs.resize(groups);
  r.by_prefix.assign(groups, 0);
  for (size_t s = 0; s < steps.size(); ++s) {
    const auto& p = steps[s].plan;
    const int gi = steps[s].group;
    if (steps[s].local) {
      if (!dqs_over_du[gi]) (local_q ? r.q : r.qs[gi]).emplace_back(s, p.query);
      r.k.emplace_back(s, p.key);
      r.v.emplace_back(s, p.value);
      continue;
    }
    r.q.emplace_back(s, p.query);
    if (p.a_from_summaries) {
      r.ks[gi].emplace_back(s, p.key);
      r.u[gi].emplace_back(s, p.value);
    } else {
      r.k.emplace_back(s, p.key);
      r.v.emplace_back(s, p.value);
    }
    if (p.summaries && p.by_segment) {
      r.ks[gi].emplace_back(s, p.summary_key);
      r.u[gi].emplace_back(s, p.summary_value);
    }
    if (p.summaries && !p.by_segment) r.by_prefix[gi] = 1;
  }
  return r;
}

}  // namespace

std::array<torch::Tensor, 6> backward_call(CallRecord record,
                                           const torch::Tensor& grad_o,
                                           const BackwardOptions& options) {
  const auto& into = options.into;
  const auto& other_delta = options.other_delta;
  TORCH_CHECK(record.mean == other_delta.defined(),
              "fused attention: a call whose o is a mean takes the other call's delta, and no "
              "other call takes one");
  const auto& saved = record.tensors;
  const auto &q = saved[0], &k = saved[1], &v = saved[2], &lse = saved[6];
  // o is read by the launch that makes its delta alone: let go of after it (in memory still where
  // the caller keeps it: a node's output, or a graph kept for another backward).
  auto o = std::move(record.tensors[5]);
  const auto passes = decode(record.plan.passes), local = decode(record.plan.local);
  const auto pools = fused_pools::decode(record.plan.pools);
  const double scale = record.plan.scale;
  const auto& dtypes = record.dtypes;
  auto ks = saved[3], u = saved[4], qs = saved[7], lse_u = saved[8];

  // The summary groups. Slots the forward made and did not keep (fused_pools::remade_in_backward)
  // are made again, a group at a time where the plan splits, else whole, here.
  std::vector<SummaryGroup> groups;
  const bool remade = fused_pools::remade_in_backward(pools);
  if (remade && !ks.defined() && !qs.defined() && !u.defined())
    groups = split_slots(passes, local, pools);
  if (groups.empty()) {
    groups = {whole_slots(passes, local, pools)};
    if (remade) {
      auto [ks_pooled, qs_pooled] = fused_pools::make(pools, k, q);
      if (!ks.defined()) ks = ks_pooled;
      if (!qs.defined()) qs = qs_pooled;
      if (!local.empty() && !u.defined())
        std::tie(u, lse_u) = local_stage(local,
                                         q,
                                         qs,
                                         k,
                                         v,
                                         ks,
                                         local_rows(local, qs, pools),
                                         passes,
                                         scale,
                                         nullptr,
                                         {},
                                         pools);
    }
  }
  const bool split = groups[0].made_here;  // else the one group of the whole slots
  const auto dtype = q.scalar_type();
  const auto d_o = kernel_ready(grad_o, dtype);
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3);

  const auto steps = backward_steps(passes, groups, q, scale);
  const size_t total = steps.size();
  // Where the first step is a joint pass whose queries, one CTA per segment, are every row of o
  // once, it makes delta itself as its query tiles land (Backward::made_delta): no delta launch.
  // (q stands in for its slots in the check: only their geometry counts.)
  // Else, where the backward's first launch is a summary group's local passes, remade (their
  // slots were not kept), that launch makes delta by CTAs of its own (fused::Forward::delta).
  // Where the record holds o alone, that launch makes it even where the first step could: o is
  // then let go of before the group's gradients are made (two slots' size), for one more read of
  // d_o.
  const auto first_group = std::find_if(
      groups.begin(), groups.end(), [](const SummaryGroup& g) { return !g.joint.empty(); });
  const bool remake_can =
      first_group != groups.end() && first_group->made_here && !first_group->local.empty() &&
      std::none_of(steps.begin(), steps.end(), [](const Step& s) { return s.group < 0; });
  const bool first_makes_delta =
      total > 0 && !(options.o_alone && remake_can) && makes_delta(steps[0], q, scale);
  const bool remake_makes_delta = !first_makes_delta && remake_can;
  // Else, where the first step's dk/dv walk can make it (its summaries read by prefix, each
  // segment's first key tile walking all its queries: combiner-fixed's joint pass), that walk
  // makes it, read by the launches after it.
  const bool walk_makes = !first_makes_delta && !remake_makes_delta && total > 0 &&
                          walk_makes_delta(steps[0], q, scale);
  const auto delta = first_makes_delta || remake_makes_delta || walk_makes
                         ? unset(lse.sizes(), lse.options())
                         : row_delta(o, d_o, lse, other_delta);
  if (!first_makes_delta && !remake_makes_delta && !walk_makes) o = torch::Tensor();
  auto delta_in_remake = remake_makes_delta ? delta_of(o, d_o, delta, other_delta) : fused::Delta();
  // The local passes read q itself (no query-side pool, no qs given); else qs, or q pooled in
  // their tiles (FusedPass::pooled), whose gradient is qs's all the same.
  const bool local_q =
      !local.empty() && !split && !qs.defined() && fused_pools::slot_rows(pools, true) == 0;
  const size_t G = groups.size();
  std::vector<char> dqs_over_du(G, 0);
  for (size_t gi = 0; gi < G; ++gi) {
    const int64_t rows = split          ? groups[gi].hi - groups[gi].lo
                         : qs.defined() ? qs.size(2)
                                        : fused_pools::slot_rows(pools, true);
    dqs_over_du[gi] = stores_qs_over_du(groups[gi], rows, D);
  }
  const auto uses = readers_of(steps, G, dqs_over_du, local_q);
  const auto &q_uses = uses.q, &k_uses = uses.k, &v_uses = uses.v;
  const auto &ks_uses = uses.ks, &u_uses = uses.u, &qs_uses = uses.qs;
  const auto& by_prefix = uses.by_prefix;
  // Where dq, dk, dv are returned (undefined: anywhere): the gradients so far, added into, or
  // the parts of a new packed gradient.
  const bool adds = into[0].defined() || into[1].defined() || into[2].defined();
  std::array<torch::Tensor, 3> homes = into;
  if (!adds && record.packed) homes = new_packed_parts(q);
  Grad dq = slot_grad(q, q_uses, total, false, homes[0], adds),
       dk = slot_grad(k, k_uses, total, false, homes[1], adds, /*keys=*/true),
       dv = slot_grad(v, v_uses, total, false, homes[2], adds);

  // One joint step over the slots ks and u (undefined where it reads none), writing their
  // gradients through dks and du; `slabs`, where its segments share key rows, the buffer it
  // writes dk into, which run_joint sums after it.
  const auto joint_backward = [&](size_t s,
                                  const torch::Tensor& ks_g,
                                  const torch::Tensor& u_g,
                                  const Grad& dks,
                                  const Grad& du,
                                  const torch::Tensor& u_delta,
                                  torch::Tensor& slabs) {
    const auto& p = steps[s].plan;
    fused::Backward bw;
    bw.pass = make_pass(p, q, k, v, ks_g, u_g, scale);
    bw.d_o = operand(d_o);
    bw.grad_scale = options.grad_scale;
    bw.lse = lse.data_ptr();
    bw.delta = delta.data_ptr();
    bw.dq = dq.out(s);
    const Grad& key_grad = p.a_from_summaries ? dks : dk;
    bw.dk = key_grad.out(s);
    bw.dv = (p.a_from_summaries ? du : dv).out(s);
    // Segments sharing their key rows: one slab each (no atomics), summed after the pass.
    const auto& key = p.key;
    if (bw.dk.kind == GradOut::kAtomic && writes_slabs(key)) {
      const std::vector<int64_t> shape{B, H, key.segments * key.limit, D};
      slabs = writes_whole_slabs(key) ? unset(shape, lse.options())
                                      : torch::zeros(shape, lse.options());
      bw.dk = grad_out(slabs, GradOut::kStoreAcc);
      bw.dk.segment_rows = key.limit;
    }
    if (p.summaries && p.by_segment) {
      bw.dks = dks.out(s);
      bw.du = du.out(s);
    } else if (p.summaries) {
      bw.dks = dks.summary_out();
      bw.du = du.summary_out();
    }
    if (s == 0 && (first_makes_delta || walk_makes)) {
      bw.made_delta = delta.data_ptr();
      bw.o = operand(o);
      if (other_delta.defined()) bw.other_delta = other_delta.data_ptr();
    }
    if (u_delta.defined()) {
      bw.summary_delta = u_delta.data_ptr();
      bw.summary_delta_rows = u_delta.size(2);
      bw.summary_delta_of_a = p.a_from_summaries;
    }
    return bw;
  };
  const auto run_joint = [&](size_t s,
                             const torch::Tensor& ks_g,
                             const torch::Tensor& u_g,
                             const Grad& dks,
                             const Grad& du,
                             const torch::Tensor& u_delta) {
    torch::Tensor slabs;
    fused_launch::backward(q, joint_backward(s, ks_g, u_g, dks, du, u_delta, slabs));
    if (s == 0) o = torch::Tensor();
    if (slabs.defined()) {
      const auto& key = steps[s].plan.key;
      const Grad& key_grad = steps[s].plan.a_from_summaries ? dks : dk;
      const auto per_segment = slabs.view({B, H, key.segments, key.limit, D});
      auto rows = key_grad.buffer.narrow(2, 0, key.limit);
      if (key_grad.slabs_fill)
        at::sum_out(rows, per_segment, {2});
      else
        rows.add_(per_segment.sum(2));
    }
  };
  for (size_t s = 0; s < total && steps[s].group < 0; ++s) run_joint(s, {}, {}, {}, {}, {});

  torch::Tensor d_ks, d_u, d_qs;  // the whole slots' gradients, where they are inputs
  for (size_t gi = 0; gi < G; ++gi) {
    const auto& group = groups[gi];
    if (group.joint.empty()) continue;  // nothing read its slots: no gradient flows into them
    torch::Tensor ks_g = ks, qs_g = qs, u_g = u, lse_u_g = lse_u;
    if (group.made_here) {
      // qs only makes u here: dropped until the local passes read it again, so that the joint
      // passes run beside four of the group's slots (ks, u and their gradients), not five.
      std::tie(ks_g, qs_g) = fused_pools::make(group.pools, k, q);
      std::tie(u_g, lse_u_g) = local_stage(group.local,
                                           q,
                                           qs_g,
                                           k,
                                           v,
                                           ks_g,
                                           group.hi - group.lo,
                                           group.joint_plan,
                                           scale,
                                           nullptr,
                                           std::exchange(delta_in_remake, fused::Delta()),
                                           group.pools);
      qs_g = torch::Tensor();
      if (remake_makes_delta) o = torch::Tensor();
    }
    const auto local_step = [&](size_t s) { return steps[s].group == int(gi) && steps[s].local; };
    // The local passes' backward runs where u has a gradient, their d_o.
    const bool local_runs =
        !group.local.empty() && u_g.defined() && (!u_uses[gi].empty() || by_prefix[gi]);
    // Pools made on chip by the group's pooled local passes: their backward runs in those passes'
    // epilogues where q's and k's gradients are stored in the kernel dtype and each pass is one CTA
    // per segment (kernel.h Backward::pools_dq, pools_backward_on_chip), reading ks's gradient at
    // their keys' rows alone; else the pool kernel's, from the gradient the passes store of their
    // queries, pooled in their tiles all the same.
    bool fold = local_runs && group.made_here && ks_g.defined() &&
                (!ks_uses[gi].empty() || by_prefix[gi]) && dq.buffer.defined() &&
                dq.buffer.scalar_type() == dtype && dk.buffer.scalar_type() == dtype &&
                std::all_of(group.pools.begin(), group.pools.end(), [](const FusedPool& p) {
                  return p.on_chip;
                });
    // The rows of u's and ks's gradients read after the joint passes: u's by the local passes,
    // as their d_o (and u's delta), and ks's by the pools' backward in their epilogues; every
    // row where the gradient is returned or a scan takes it back.
    std::vector<fused::Geometry> local_queries_read, pooled_keys_read;
    for (size_t s = 0; s < total; ++s) {
      if (!local_step(s)) continue;
      fold = fold && steps[s].plan.pooled && dk.out(s).kind == GradOut::kStore &&
             fused::pools_backward_on_chip(make_pass(steps[s].plan, q, q, q, {}, {}, scale));
      local_queries_read.push_back(steps[s].plan.query);
      pooled_keys_read.push_back(steps[s].plan.pooled_keys);
    }
    // (Else the rows the pool kernels' backward reads, where they read only some.)
    const auto key_pools_read = read_in_backward(group.pools, /*query_side=*/false);
    // ks's gradient read by one segment max over all of ks's rows alone (rowmajor's row maxes),
    // which may take it in slabs.
    const auto key_side = std::count_if(
        group.pools.begin(), group.pools.end(), [](const FusedPool& p) { return !p.query_side; });
    const auto key_pool = std::find_if(
        group.pools.begin(), group.pools.end(), [](const FusedPool& p) { return !p.query_side; });
    const bool dks_summed_as_read = !group.made_here && ks_g.defined() && key_side == 1 &&
                                    key_pool->kind == FusedPool::Kind::kSegmentMax &&
                                    key_pool->first == 0 && key_pool->segments == ks_g.size(2);
    const GradPlan dks_plan = plan_grad(ks_g,
                                        ks_uses[gi],
                                        by_prefix[gi],
                                        fold                     ? &pooled_keys_read
                                        : key_pools_read.empty() ? nullptr
                                                                 : &key_pools_read,
                                        /*keys=*/true,
                                        dks_summed_as_read),
                   du_plan = plan_grad(
                       u_g, u_uses[gi], by_prefix[gi], local_runs ? &local_queries_read : nullptr);
    // Where one joint pass writes all of du (u its source A's or its source B's by segment,
    // stored: its one reader, in place), it also makes u's delta for the local passes, in the
    // epilogue that stores du (Backward::summary_delta): no delta launch reading u and du again.
    // Rows of u it does not read have du 0 and delta 0, where a local pass reads them.
    const size_t u_writer = u_uses[gi].size() == 1 ? u_uses[gi][0].first : total;
    BufferSpec u_delta_spec;
    if (local_runs && u_writer < total && !by_prefix[gi] && du_plan.in_place)
      u_delta_spec = {
          lse_u_g.sizes().vec(),
          lse_u_g.options(),
          !first_stores_what_is_read({u_uses[gi][0]}, &local_queries_read, u_g.size(2))};
    // The group's buffers, the zeroed ones in one fill.
    auto made = make_buffers({dks_plan.buffer, du_plan.buffer, u_delta_spec});
    Grad dks = bind_grad(dks_plan, std::move(made[0]), ks_uses[gi], total),
         du = bind_grad(du_plan, std::move(made[1]), u_uses[gi], total);
    const torch::Tensor u_delta = std::move(made[2]);
    for (size_t s = 0; s < total; ++s)
      if (steps[s].group == int(gi) && !steps[s].local && !steps[s].paired)
        run_joint(s, ks_g, u_g, dks, du, s == u_writer ? u_delta : torch::Tensor());
    // A joint step paired with a local one runs alone where the local passes do not run.
    const auto run_paired_alone = [&] {
      for (size_t s = 0; s < total; ++s)
        if (steps[s].group == int(gi) && steps[s].paired) run_joint(s, {}, {}, {}, {}, {});
    };
    if (group.made_here && du.buffer.defined()) {
      ks_g = torch::Tensor();  // read by the joint passes alone
      std::vector<FusedPool> query_side;
      for (const auto& p : group.pools)
        if (p.query_side && !p.on_chip) query_side.push_back(p);  // on chip: in the tiles
      if (!query_side.empty()) qs_g = fused_pools::make(query_side, k, q).second;
    }
    Grad dqs = slot_grad(qs_g, qs_uses[gi], total, false);
    bool group_pools_done = false;  // the pools' backward ran in the local pass's epilogue
    bool key_pool_done = false;     // a key side's segment max's backward ran in a local pass
    const FusedPool* query_pool_done = nullptr;  // a query side's, in the pass's query CTAs
    if (local_runs) {
      const auto d_o_u = kernel_ready(du.buffer, dtype);
      const auto local_pass = [&](size_t s) {
        return make_pass(steps[s].plan, local_queries(steps[s].plan, q, qs_g), k, v, {}, {}, scale);
      };
      // Where no joint pass made u's delta, the group's first local pass makes it, as the first
      // joint pass makes o's (Backward::made_delta), where it runs alone over every row of u
      // (fixed's pooled queries), one CTA per segment or, at blocks longer than a key tile, in
      // its dk/dv walk: no delta launch.
      size_t delta_maker = total;
      for (size_t s = 0; s < total && !u_delta.defined(); ++s) {
        if (!local_step(s)) continue;
        if (!(s > 0 && steps[s - 1].paired) && covers(steps[s].plan.query, u_g.size(2)) &&
            fused::makes_delta_built(local_pass(s)))
          delta_maker = s;
        break;
      }
      const auto delta_u = u_delta.defined()     ? u_delta
                           : delta_maker < total ? unset(lse_u_g.sizes(), lse_u_g.options())
                                                 : row_delta(u_g, d_o_u, lse_u_g);
      const auto u_for_delta = delta_maker < total ? u_g : torch::Tensor();
      u_g = torch::Tensor();  // (a group's own: its last read, but for its delta's maker)
      if (dqs_over_du[gi]) {
        dqs.buffer = d_o_u;
        dqs.by_pass.assign(total, GradOut{});
        for (size_t s = 0; s < total; ++s)
          if (steps[s].group == int(gi) && steps[s].local)
            dqs.by_pass[s] = grad_out(d_o_u, GradOut::kStore);
      }
      // A pooled pass's queries live in its tiles alone: their gradient has no buffer unless the
      // local passes store it over u's (every row once), so their pools' backward must fold.
      TORCH_CHECK(fold || dqs_over_du[gi] ||
                      std::none_of(group.pools.begin(),
                                   group.pools.end(),
                                   [](const FusedPool& p) {
                                     return p.on_chip && p.query_side &&
                                            p.kind == FusedPool::Kind::kRunningMax;
                                   }),
                  "fused attention: pooled local passes over part of u's rows need their pools' "
                  "backward in their own epilogues");
      const auto d_ks_pooled = fold ? kernel_ready(dks.buffer, dtype) : torch::Tensor();
      // A key side's segment max made on chip by a local pass: its backward in that pass's
      // CTAs, into dk in place, where the pass stores dk's rows in the kernel dtype
      // (fused::Backward::key_pool); its pool launch goes.
      const auto key_pool_of = [&](size_t s) -> const FusedPool* {
        if (group.made_here || !dks.buffer.defined() || dk.buffer.scalar_type() != dtype ||
            dk.out(s).kind != GradOut::kStore)
          return nullptr;
        for (size_t later = s + 1; later < total; ++later)  // the last to write dk's rows
          if (dk.out(later).kind != GradOut::kNone) return nullptr;
        for (const auto& p : group.pools)
          if (p.on_chip && key_pool_backward_fits_on_chip(steps[s].plan, q, p) && !key_pool_done)
            return &p;
        return nullptr;
      };
      // A query side's segment max made on chip by a local pass (its queries): its backward in
      // that pass's query CTAs, each once it has stored its query's gradient, dy (the whole of it:
      // the group's one local pass, launched alone), into dq in place, where dq is stored in the
      // kernel dtype and no later pass writes it (fused::Backward::query_pool); its pool launch
      // goes.
      const auto query_pool_of = [&](size_t s, const torch::Tensor& dy) -> const FusedPool* {
        if (local_q || fold || !dy.defined() || !dy.is_contiguous() || !dq.buffer.defined() ||
            dq.buffer.scalar_type() != dtype || dq.buffer.stride(3) != 1 ||
            (s > 0 && steps[s - 1].paired))
          return nullptr;
        for (size_t other = 0; other < total; ++other)
          if ((other != s && local_step(other)) ||
              (other > s && dq.out(other).kind != GradOut::kNone))
            return nullptr;
        for (const auto& p : group.pools)
          if (p.on_chip && p.segments == dy.size(2) && query_pool_fits_on_chip(steps[s].plan, q, p))
            return &p;
        return nullptr;
      };
      for (size_t s = 0; s < total; ++s) {
        if (!local_step(s)) continue;
        fused::Backward bw;
        bw.pass = local_pass(s);
        bw.d_o = operand(d_o_u);
        bw.lse = lse_u_g.data_ptr();
        bw.delta = delta_u.data_ptr();
        if (s == delta_maker) {
          bw.made_delta = delta_u.data_ptr();
          bw.o = operand(u_for_delta);
        }
        bw.dq = (local_q ? dq : dqs).out(s);
        bw.dk = dk.out(s);
        bw.dv = dv.out(s);
        if (const FusedPool* pool = key_pool_of(s)) {
          bw.key_pool = fused_pools::on_chip_backward(*pool, k, dks.buffer, dk.buffer, dks.slabs);
          key_pool_done = true;
        }
        if (const FusedPool* pool = query_pool_of(s, dqs.buffer)) {
          bw.query_pool = fused_pools::on_chip_backward(*pool, q, dqs.buffer, dq.buffer);
          if (fused::query_pool_backward_fits(bw))  // (its dy as the pass stores it)
            query_pool_done = pool;
          else
            bw.query_pool = {};
        }
        if (fold) {
          bw.dq = {};
          bw.pools_dq = grad_out(dq.buffer, GradOut::kStore);
          bw.pools_dq.addend = bw.pools_dq.data;  // added into
          bw.pools_dq.addend_in_storage = true;
          bw.d_pooled_keys = operand(d_ks_pooled);
        }
        // The joint step before it, paired: one launch where the two pair, else one each.
        fused::BackwardPair pair;
        torch::Tensor slabs;
        if (s > 0 && steps[s - 1].paired) {
          pair = {joint_backward(s - 1, {}, {}, {}, {}, {}, slabs), bw};
          if (!slabs.defined() && fused::pairable(pair.first, pair.second)) {
            fused_launch::backward_pair(q, pair);
            continue;
          }
          run_joint(s - 1, {}, {}, {}, {}, {});
        }
        fused_launch::backward(q, bw);
      }
      if (fold) group_pools_done = true;
    } else {
      run_paired_alone();
      if (du.buffer.defined()) d_u = du.buffer.to(torch::ScalarType(dtypes[3]));
    }
    // Pooled slots are no inputs: their gradients go through the pools into k's and q's (a key
    // side's made on chip, through its local pass, above).
    std::vector<FusedPool> left;
    for (const auto& p : group.pools)
      if (!group_pools_done && !(key_pool_done && !p.query_side) && &p != query_pool_done)
        left.push_back(p);
    if (key_pool_done) dks.buffer = torch::Tensor();
    if (query_pool_done) dqs.buffer = torch::Tensor();
    if (!left.empty()) {
      const auto pooled = [&](bool query_side) {
        return std::any_of(left.begin(), left.end(), [&](const FusedPool& p) {
          return p.query_side == query_side;
        });
      };
      const auto through = [&](Grad& slot, bool query_side) {
        return pooled(query_side) ? std::exchange(slot.buffer, torch::Tensor()) : torch::Tensor();
      };
      const auto dks_pooled = through(dks, false), dqs_pooled = through(dqs, true);
      fused_pools::add_backward(
          left, k, dks_pooled, dk.buffer, q, dqs_pooled, dq.buffer, dks.slabs);
    }
    TORCH_CHECK(dks.slabs == 1 || !dks.buffer.defined(),
                "fused attention: ks's gradient in slabs is its segment max's to sum");
    if (!group.made_here) {
      d_ks = dks.buffer;
      d_qs = dqs.buffer;
    }
  }
  auto as = [&](const torch::Tensor& g, int64_t type) {
    return g.defined() ? g.to(torch::ScalarType(type)) : torch::Tensor();
  };
  // A home: the buffer itself, or the buffer copied (added) into it; zeros (the gradient so far)
  // where none.
  auto at_home = [&](const Grad& g, const torch::Tensor& home, int64_t type) -> torch::Tensor {
    if (!home.defined()) return as(g.buffer, type);
    if (!g.buffer.defined()) return adds ? home : home.zero_();
    if (!g.buffer.is_same(home)) adds ? home.add_(g.buffer) : home.copy_(g.buffer);
    return home;
  };
  if (options.delta != nullptr) *options.delta = delta;
  return {at_home(dq, homes[0], int64_t(dtype)),
          at_home(dk, homes[1], dtypes[0]),
          at_home(dv, homes[2], dtypes[1]),
          as(d_ks, dtypes[2]),
          d_u,
          as(d_qs, dtypes[4])};
}

}  // namespace combiner::attention::fused_glue
