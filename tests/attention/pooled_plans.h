// The local stages of vertical and horizontal as fused_axial.cpp plans them at L, W, their
// running max pools made by the scan kernels or, `on_chip`, by the local passes themselves
// (FusedPass::pooling, FusedPool::on_chip): shared by tests/attention/pooled_test.cpp (the CPU
// model) and tests/emulated/pooled_test.cpp (the CUDA source).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/fused/fused.h"

namespace combiner::attention::pooled_plans {

struct Plan {
  std::vector<FusedPool> pools;
  std::vector<FusedPass> local, joint;
};

// One pass down each column; the running maxes of k and q down the columns.
inline Plan vertical(int64_t L, int64_t W, bool on_chip) {
  const int64_t spans = (L + W - 1) / W - 1;
  Plan p;
  p.pools = {FusedPool::running_max(false, spans, W, 2, false, 0),
             FusedPool::running_max(true, spans, W, 2, false, 0)};
  FusedPass local;
  local.query = local.key = local.value = {W, spans, 1, W, spans * W};
  local.mask = fused::Mask::kCausal;
  if (on_chip) local.pooling(local.key);
  p.local = {local};
  for (auto& pool : p.pools) pool.on_chip = on_chip;
  p.joint = vertical_joint_passes(L, W);
  return p;
}

// A prefix pass along each row and a suffix pass right to left; the running maxes of k and q
// along the rows both ways (the suffixes' in the second half of ks and qs). Each pass runs over
// `len` columns of each row, from its first or its last.
inline Plan horizontal_over(int64_t L, int64_t W, bool on_chip, int64_t len) {
  const int64_t spans = (L + W - 1) / W - 1, n = spans * W;
  Plan p;
  for (const bool query_side : {false, true})
    for (const bool reverse : {false, true})
      p.pools.push_back(FusedPool::running_max(query_side, spans, W, 3, reverse, reverse ? n : 0));
  FusedPass prefix, suffix;
  prefix.query = {spans, len, W, 1, 2 * n};
  prefix.key = prefix.value = {spans, len, W, 1, n};
  suffix.query = {spans, len, W, -1, 2 * n, n + W - 1};
  suffix.key = suffix.value = {spans, len, W, -1, n, W - 1};
  prefix.mask = suffix.mask = fused::Mask::kCausal;
  if (on_chip) {
    prefix.pooling(prefix.query);
    suffix.pooling(suffix.query);
  }
  p.local = {prefix, suffix};
  for (auto& pool : p.pools) pool.on_chip = on_chip;
  p.joint = horizontal_joint_passes(L, W);
  return p;
}

// As the variant plans it: where the passes pool on chip, over the W - 1 columns whose summaries
// are read, and where they do not also take the pools' backward (W - 1 columns more than one
// tile; fused_axial.cpp also asks the dtype and head dim) the scans' backward reads those steps
// alone (FusedPool::read_steps); else over whole rows, as the scans' backward reads every row.
inline Plan horizontal(int64_t L, int64_t W, bool on_chip) {
  Plan p = horizontal_over(L, W, on_chip, on_chip ? W - 1 : W);
  if (on_chip && W - 1 > fused::kQueryTile)
    for (auto& pool : p.pools) pool.read_steps = W - 1;
  return p;
}

}  // namespace combiner::attention::pooled_plans
