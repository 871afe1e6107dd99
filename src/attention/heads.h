// The q, k and v heads of one packed projection, and the projection's gradient back in its own
// layout.
//
// A block's Linear(W, 3W) writes, per position, q, k and v side by side: [B, L, 3, H, D] in
// memory. split_heads returns the three [B, H, L, D] views of it that attention takes (SDPA's
// layout). Its backward gives the projection's gradient [B, L, 3W]:
//  - where the three gradients are already the three parts of one packed tensor (the fused
//    kernels write them so when their q, k and v are parts of one: `packed_parts`), that tensor
//    itself: no copy, no kernel;
//  - else one stack of the three into the packed layout. (unbind's backward stacks them into
//    [3, B, H, L, D] and the reshape back to [B, L, 3W] copies that again: two passes.)
#pragma once

#include <torch/torch.h>

#include <array>

namespace combiner::attention {

// qkv [B, L, 3 * H * D] (the last axis contiguous, q's D columns of each head first, then k's,
// then v's) -> q, k, v [B, H, L, D], views of it.
std::array<torch::Tensor, 3> split_heads(const torch::Tensor& qkv, int64_t heads);

// The packed [B, L, 3, H, D] tensor (contiguous) of which q, k and v are the three parts as
// split_heads makes them (same storage, k H * D elements after q, v 2 H * D), or an undefined
// tensor when they are not.
torch::Tensor packed_parts(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// A new packed [B, L, 3, H, D] tensor (uninitialised) for three parts of q's shape [B, H, L, D],
// as those parts.
std::array<torch::Tensor, 3> new_packed_parts(const torch::Tensor& q);

}  // namespace combiner::attention
