// Fenwick-span helpers for the logsparse pair. At level m the span of position i exists iff bit
// m of i is set; it is the aligned block of 2^m positions with index (i >> m) - 1. So per level,
// block summaries come from a reshape and reach positions by a shift-and-repeat, never a gather.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace combiner::attention {

// Number of levels m with 2^m <= L - 1 (the bits any position i < L can have).
int64_t fenwick_levels(int64_t length);

// x: [B, H, L, X] -> [B, H, nb, 2^m, X], zero-padded to a multiple of 2^(m+1) (nb even).
torch::Tensor fenwick_blocks(const torch::Tensor& x, int64_t level);

// summary: [B, H, nb, X], one row per block of 2^m -> [B, H, L, X], where position i holds the
// summary of block (i >> m) - 1 when bit m of i is set, and zeros otherwise.
torch::Tensor fenwick_spread(const torch::Tensor& summary, int64_t level, int64_t length);

// [L, 1] bool: bit m of i is set (position i has a span at this level).
torch::Tensor fenwick_allowed(int64_t level, int64_t length, torch::Device device);

}  // namespace combiner::attention
