#include "attention/fused/backward_plan.h"

#include <algorithm>
#include <utility>

#include "attention/fused/checks.h"
#include "attention/fused/function.h"

namespace combiner::attention::fused_glue {

using fused::GradOut;

bool reads_slots(const FusedPass& p) {
  return p.a_from_summaries || p.summaries;
}

namespace {

// The rows [lo, hi) that g's indices name (lo >= hi: none).
std::pair<int64_t, int64_t> rows_named(const fused::Geometry& g) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t s = 0; s < g.segments; ++s) {
    const int64_t n = fused::valid_count(g, s);
    if (n == 0) continue;
    const int64_t a = fused::row_of(g, s, 0), b = fused::row_of(g, s, n - 1);
    lo = std::min({lo, a, b});
    hi = std::max({hi, a + 1, b + 1});
  }
  return {lo, hi};
}

// g as it reads a group's slots, whose row 0 is row lo of the whole ones: the same indices name
// the same rows, less lo (g names no row at or past hi).
fused::Geometry within(fused::Geometry g, int64_t lo, int64_t hi) {
  g.first -= lo;
  g.limit = std::min(g.limit, hi) - lo;
  return g;
}

// The pass's slot reads (source A from the summaries, source B by segment) relative to `group`.
FusedPass within(FusedPass p, const SummaryGroup& group) {
  if (p.a_from_summaries) {
    p.key = within(p.key, group.lo, group.hi);
    p.value = within(p.value, group.lo, group.hi);
  }
  if (p.summaries && p.by_segment) {
    p.summary_key = within(p.summary_key, group.lo, group.hi);
    p.summary_value = within(p.summary_value, group.lo, group.hi);
  }
  return p;
}

// Whether joint step `a`, reading no slot, and local step `b` may run in one launch
// (fused::pairable), judged from their plans: b's pools' backward in its epilogue where it can
// (fused::pools_backward_on_chip); and, b's queries pooled (`pooled_queries`: a query side's slot,
// whose gradient its local passes may write over u's, their d_o), not as two walks (the glue may
// still decide otherwise; the launch checks again).
bool may_pair(
    const Step& a, const Step& b, bool pooled_queries, const torch::Tensor& q, double scale) {
  fused::Backward first, second;
  first.pass = make_pass(a.plan, q, q, q, {}, {}, scale);
  second.pass = make_pass(b.plan, q, q, q, {}, {}, scale);
  if (b.plan.pooled && fused::pools_backward_on_chip(second.pass))
    second.pools_dq.kind = GradOut::kStore;
  if (pooled_queries && !fused::segment_backward(second.pass)) return false;
  return fused::pairable(first, second);
}

// Joint passes reading no slot that pair with a local pass move to just before it (backward_steps).
void pair_steps(std::vector<Step>& steps,
                const std::vector<SummaryGroup>& groups,
                const torch::Tensor& q,
                double scale) {
  for (size_t l = 0; l < steps.size(); ++l) {
    if (!steps[l].local || (l > 0 && steps[l - 1].paired)) continue;
    const auto& pools = groups[size_t(steps[l].group)].pools;
    const bool pooled_queries =
        std::any_of(pools.begin(), pools.end(), [](const FusedPool& p) { return p.query_side; });
    for (size_t a = 0; a < l; ++a) {
      if (steps[a].local || steps[a].group >= 0 || steps[a].paired ||
          !may_pair(steps[a], steps[l], pooled_queries, q, scale))
        continue;
      Step moved = steps[a];
      moved.paired = true;
      moved.group = steps[l].group;
      steps.erase(steps.begin() + std::ptrdiff_t(a));
      steps.insert(steps.begin() + std::ptrdiff_t(l - 1), moved);
      break;
    }
  }
}

// Whether `step` is a joint pass run alone over every row of o once whose pass (q standing in for
// its slots: only their geometry counts) meets `can`.
bool alone_over_o(const Step& step,
                  const torch::Tensor& q,
                  double scale,
                  bool (*can)(const fused::Pass&)) {
  return !step.local && !step.paired && covers(step.plan.query, q.size(2)) &&
         can(make_pass(step.plan, q, q, q, q, q, scale));
}

// The joint passes reading no slot, first, wait for nothing: where the first of them cannot make
// o's delta and the first group's first joint pass can (makes_delta), that pass runs first and
// they run just after it, in its group, so that no delta launch runs before them (rowmajor's and
// horizontal's row pass at rows of 96, two query tiles a row, and their column pass, one CTA a
// column over every row of o).
void delta_maker_first(std::vector<Step>& steps, const torch::Tensor& q, double scale) {
  size_t lead = 0;
  while (lead < steps.size() && steps[lead].group < 0 && !steps[lead].local) ++lead;
  if (lead == 0 || lead == steps.size() || makes_delta(steps[0], q, scale) ||
      !makes_delta(steps[lead], q, scale))
    return;
  for (size_t s = 0; s < lead; ++s) steps[s].group = steps[lead].group;
  std::rotate(steps.begin(),
              steps.begin() + std::ptrdiff_t(lead),
              steps.begin() + std::ptrdiff_t(lead + 1));
}

}  // namespace

bool makes_delta(const Step& step, const torch::Tensor& q, double scale) {
  return alone_over_o(step, q, scale, &fused::segment_backward);
}

bool walk_makes_delta(const Step& step, const torch::Tensor& q, double scale) {
  return alone_over_o(step, q, scale, &fused::walk_makes_delta);
}

// One group of the whole slots (given, kept, or made in full): every pool, local pass and joint
// pass that reads a slot.
SummaryGroup whole_slots(const std::vector<FusedPass>& passes,
                         const std::vector<FusedPass>& local,
                         const std::vector<FusedPool>& pools) {
  SummaryGroup g;
  g.pools = pools;
  g.local = local;
  for (size_t i = 0; i < passes.size(); ++i)
    if (reads_slots(passes[i])) {
      g.joint.push_back(i);
      g.joint_plan.push_back(passes[i]);
    }
  return g;
}

// The call's slots split into groups that can be made and read one at a time: the pools' row
// ranges, each written by one key-side and one query-side pool, with every local pass's queries
// and every joint pass's slot reads inside one of them. Empty where the plan does not split so
// (summaries by prefix, which every later segment reads; a local stage over q itself).
std::vector<SummaryGroup> split_slots(const std::vector<FusedPass>& passes,
                                      const std::vector<FusedPass>& local,
                                      const std::vector<FusedPool>& pools) {
  std::vector<SummaryGroup> groups;
  for (const auto& p : pools) {
    const int64_t lo = p.first, hi = p.first + p.rows();
    auto at = std::find_if(groups.begin(), groups.end(), [&](const SummaryGroup& g) {
      return g.lo == lo && g.hi == hi;
    });
    if (at == groups.end()) {
      groups.emplace_back();
      groups.back().lo = lo;
      groups.back().hi = hi;
      at = groups.end() - 1;
    }
    FusedPool shifted = p;
    shifted.first = 0;
    at->pools.push_back(shifted);
    at->made_here = true;
  }
  std::sort(groups.begin(), groups.end(), [](const SummaryGroup& a, const SummaryGroup& b) {
    return a.lo < b.lo;
  });
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    const bool both_sides = g.pools.size() == 2 && g.pools[0].query_side != g.pools[1].query_side;
    if (!both_sides || (i > 0 && g.lo < groups[i - 1].hi)) return {};
  }
  // The group holding rows [lo, hi), or none.
  const auto group_of = [&](std::pair<int64_t, int64_t> rows) -> SummaryGroup* {
    for (auto& g : groups)
      if (rows.first < rows.second && rows.first >= g.lo && rows.second <= g.hi) return &g;
    return nullptr;
  };
  for (const auto& p : local) {
    auto* g = group_of(rows_named(p.query));
    if (g == nullptr) return {};
    FusedPass shifted = p;
    shifted.query = within(p.query, g->lo, g->hi);
    if (p.pooled) shifted.pooled_keys = within(p.pooled_keys, g->lo, g->hi);
    g->local.push_back(shifted);
  }
  for (size_t i = 0; i < passes.size(); ++i) {
    const auto& p = passes[i];
    if (!reads_slots(p)) continue;
    if (p.summaries && !p.by_segment) return {};
    SummaryGroup* g = nullptr;
    std::vector<fused::Geometry> reads;
    if (p.a_from_summaries) reads = {p.key, p.value};
    if (p.summaries) reads.insert(reads.end(), {p.summary_key, p.summary_value});
    for (const auto& r : reads) {
      auto* of = group_of(rows_named(r));
      if (of == nullptr || (g != nullptr && of != g)) return {};
      g = of;
    }
    g->joint.push_back(i);
    g->joint_plan.push_back(within(p, *g));
  }
  return groups;
}

std::vector<Step> backward_steps(const std::vector<FusedPass>& passes,
                                 const std::vector<SummaryGroup>& groups,
                                 const torch::Tensor& q,
                                 double scale) {
  std::vector<Step> steps;
  for (size_t i = 0; i < passes.size(); ++i)
    if (!reads_slots(passes[i])) steps.push_back({false, i, -1, passes[i]});
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    const auto& g = groups[gi];
    for (size_t j = 0; j < g.joint.size(); ++j)
      steps.push_back({false, g.joint[j], int(gi), g.joint_plan[j]});
    for (size_t j = 0; !g.joint.empty() && j < g.local.size(); ++j)
      steps.push_back({true, j, int(gi), g.local[j]});
  }
  pair_steps(steps, groups, q, scale);
  delta_maker_first(steps, q, scale);
  return steps;
}

}  // namespace combiner::attention::fused_glue
