// The max pools a fused call makes itself (FusedPool, fused.h): the slot ks or qs made from k or
// q in the pool kernels, and their backward added into k's or q's gradient in place. The glue of
// function.cpp runs them before its passes and after them (pool_stage.cpp; the scans as the
// kernels take them: pool_scans.h).
#pragma once

#include <torch/torch.h>

#include "attention/fused/fused.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace combiner::attention::fused_pools {

// The pools as integers (they travel in the autograd context), and back.
std::vector<int64_t> encode(const std::vector<FusedPool>& pools);
std::vector<FusedPool> decode(const std::vector<int64_t>& ints);

// The slots the pools make: ks from k and qs from q, [B, H, rows, D] in x's dtype, contiguous,
// every row written by its pool (rows no pool writes are zeros); undefined for a side without
// pools. k, q as the kernels read them (last axis contiguous). Every pool's scan in one launch
// per kind. Pools made on chip (FusedPool::on_chip) run no scan here: their ks rows are the
// local pass's to write (left unwritten), and their queries have no slot.
std::pair<torch::Tensor, torch::Tensor> make(const std::vector<FusedPool>& pools,
                                             const torch::Tensor& k,
                                             const torch::Tensor& q);

// The rows of its slot whose gradient a pool's backward reads (FusedPool::read_steps).
fused::Geometry read_in_backward(const FusedPool& p);

// The rows of one side's slot: the end of its pools' rows (0: no pool), made on chip or not.
int64_t slot_rows(const std::vector<FusedPool>& pools, bool query_side);

// Whether the call makes its pooled slots again in backward rather than keeping them: where a
// pool is a running max (the cumulative pools of vertical and horizontal, as many rows as the k
// or q they pool); plain segment maxes (one row per segment) are kept.
bool remade_in_backward(const std::vector<FusedPool>& pools);

// A key-side segment max made on chip (FusedPool::on_chip, key_pool_fits_on_chip): the
// descriptor its local pass's forward takes (fused::Forward::key_pool: k's segments into ks's
// rows, ks contiguous with the pool's rows), and its backward's (fused::Backward::key_pool: d_ks,
// contiguous, its rows' gradient in k's dtype or float, added through it into dk in place; or
// `slabs` slabs of it, [B, H, slabs x rows, D], whose sum it is: fused::SegmentMax::dy_slabs).
fused::SegmentMax on_chip_forward(const FusedPool& pool,
                                  const torch::Tensor& k,
                                  const torch::Tensor& ks);
fused::SegmentMax on_chip_backward(const FusedPool& pool,
                                   const torch::Tensor& k,
                                   const torch::Tensor& d_ks,
                                   const torch::Tensor& dk,
                                   int64_t slabs = 1);

// dk += the gradient through the key side's pools of d_ks (ks's gradient, any float dtype), and
// dq += the query side's of d_qs (an undefined slot gradient adds nothing). dk, dq: k's and q's
// gradients, in their dtype with a contiguous last axis; undefined: made here (zeros, then the
// pools' part). The two sides' scans share launches; two of one side (horizontal's prefix and
// suffix) do not. `key_slabs` > 1: d_ks is that many slabs of ks's gradient, whose sum it is
// (one key-side segment max over the whole slot: fused::SegmentMax::dy_slabs).
void add_backward(const std::vector<FusedPool>& pools,
                  const torch::Tensor& k,
                  const torch::Tensor& d_ks,
                  torch::Tensor& dk,
                  const torch::Tensor& q,
                  const torch::Tensor& d_qs,
                  torch::Tensor& dq,
                  int64_t key_slabs = 1);

}  // namespace combiner::attention::fused_pools
