// Shared work of the axial family. Layout: L = n * W, viewed as rows [B, H, n, W, *] (row r,
// column c) or columns [B, H, W, n, *]. The axial support of (r, c) is its row up to c plus its
// column above r; both score blocks come back in row layout, ready for joint_softmax.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace combiner::attention {

// [B, H, L, X] -> [B, H, n, W, X].
torch::Tensor to_rows(const torch::Tensor& x, int64_t row_len);

struct AxialScores {
  torch::Tensor row;     // [B, H, n, W, W]: (r, c) vs (r, c'), allowed c' <= c
  torch::Tensor column;  // [B, H, n, W, n]: (r, c) vs (r', c), allowed r' < r
};

// q, k: [B, H, n, W, D] in the compute dtype; scaled and masked with -inf.
AxialScores axial_scores(const torch::Tensor& q, const torch::Tensor& k, double scale);

// Weights shaped like AxialScores, v: [B, H, n, W, Dv] -> [B, H, n, W, Dv].
torch::Tensor axial_output(const torch::Tensor& w_row,
                           const torch::Tensor& w_column,
                           const torch::Tensor& v);

// [B, H, W, n, n] scores (per column, query row R vs row r) times values [B, H, n, W, Dv]
// -> [B, H, n, W, Dv], with the weights given in row layout [B, H, n, W, n].
torch::Tensor column_output(const torch::Tensor& w_rows_layout, const torch::Tensor& values);

}  // namespace combiner::attention
