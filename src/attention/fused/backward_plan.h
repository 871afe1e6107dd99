// The backward's plan (backward.cpp): the summary groups its slots are read in, and its steps in
// the order they run, with the joint passes that run in a local pass's launch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "attention/fused/fused.h"

namespace combiner::attention::fused_glue {

// Rows [lo, hi) of the slots ks, qs and u that one set of pools makes, one set of local passes
// writes (u) and reads (qs), and one set of joint passes reads (ks, u). Geometries and pools are
// kept relative to row lo of the group's own slots.
struct SummaryGroup {
  int64_t lo = 0, hi = std::numeric_limits<int64_t>::max();
  std::vector<FusedPool> pools;
  std::vector<FusedPass> local;
  std::vector<size_t> joint;  // the joint passes reading its slots
  std::vector<FusedPass> joint_plan;
  bool made_here = false;  // its slots are made in backward, for it alone
};

// Whether a joint pass reads the slots ks and u (source A from the summaries, or source B).
bool reads_slots(const FusedPass& p);

// One group of the whole slots (given, kept, or made in full): every pool, local pass and joint
// pass that reads a slot.
SummaryGroup whole_slots(const std::vector<FusedPass>& passes,
                         const std::vector<FusedPass>& local,
                         const std::vector<FusedPool>& pools);

// The call's slots split into groups that can be made and read one at a time: the pools' row
// ranges, each written by one key-side and one query-side pool, with every local pass's queries
// and every joint pass's slot reads inside one of them. Empty where the plan does not split so
// (summaries by prefix, which every later segment reads; a local stage over q itself).
std::vector<SummaryGroup> split_slots(const std::vector<FusedPass>& passes,
                                      const std::vector<FusedPass>& local,
                                      const std::vector<FusedPool>& pools);

// One step of the backward: joint pass `index` or local pass `index` of group `group` (joint
// passes reading no slot: no group), with the plan it runs.
struct Step {
  bool local = false;
  size_t index = 0;
  int group = -1;
  FusedPass plan;
  bool paired = false;  // a joint pass run in the launch of the local step after it
};

// The steps in the order they run: the joint passes reading no slot; then per group its joint
// passes and, where they read its u, its local passes (their queries are qs, or q itself). A
// joint pass reading no slot that pairs with a local pass (fused::pairable: vertical's column
// pass and its local pass, one CTA per column each) runs just before it, in its launch (`paired`):
// after the group's joint passes, since the local pass's d_o is u's gradient, which they make.
// Where the first group's first joint pass makes o's delta (makes_delta) and the first step
// would not, it goes first, and the joint passes reading no slot run after it, in its group.
// Whether `step`, run first, makes o's delta itself (fused::Backward::made_delta): a joint pass,
// one CTA per segment (fused::segment_backward), whose queries are every row of o once.
bool makes_delta(const Step& step, const torch::Tensor& q, double scale);
// Whether `step`, run first, makes o's delta in its dk/dv walk (fused::walk_makes_delta): a joint
// pass whose queries are every row of o once, where no pass can make it one CTA per segment
// (combiner-fixed's, which reads its summaries by prefix).
bool walk_makes_delta(const Step& step, const torch::Tensor& q, double scale);

std::vector<Step> backward_steps(const std::vector<FusedPass>& passes,
                                 const std::vector<SummaryGroup>& groups,
                                 const torch::Tensor& q,
                                 double scale);

}  // namespace combiner::attention::fused_glue
