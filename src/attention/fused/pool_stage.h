// The max pools a fused call makes itself (FusedPool, fused.h): the slot ks or qs made from k or
// q in the pool kernels, and their backward added into k's or q's gradient in place. The glue of
// function.cpp runs them before its passes and after them; pools.cpp holds the kernels' torch side.
#pragma once

#include <torch/torch.h>

#include "attention/fused/fused.h"

#include <cstdint>
#include <vector>

namespace combiner::attention::fused_pools {

// The pools as integers (they travel in the autograd context), and back.
std::vector<int64_t> encode(const std::vector<FusedPool>& pools);
std::vector<FusedPool> decode(const std::vector<int64_t>& ints);

// The slot of one side (query_side: qs from q, else ks from k): [B, H, rows, D] in x's dtype,
// contiguous, every row written by its pool (rows no pool writes are zeros); undefined when no
// pool is of that side. x: k or q as the kernels read it (last axis contiguous).
torch::Tensor make(const std::vector<FusedPool>& pools, bool query_side, const torch::Tensor& x);

// dx += the gradient through that side's pools of d_slot (the slot's gradient, any float dtype).
// dx: x's gradient, contiguous in x's dtype; undefined: made here (zeros, then the pools' part).
void add_backward(const std::vector<FusedPool>& pools,
                  bool query_side,
                  const torch::Tensor& x,
                  const torch::Tensor& d_slot,
                  torch::Tensor& dx);

}  // namespace combiner::attention::fused_pools
