// Tensor helpers shared by the fast paths: compute dtype, padding, shifting, masking and the
// one softmax over direct and span scores (concatenated along the last axis).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace combiner::attention {

// TORCH_CHECKs q, k: [B, H, L, D] and v: [B, H, L, Dv] with matching B, H, L.
void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The dtype scores and softmax run in: fp32 for half/bf16 inputs, else the input's own.
torch::ScalarType compute_dtype(const torch::Tensor& x);

// Zero-pads dim 2 (L of [B, H, L, X]) up to `length`.
torch::Tensor pad_length(const torch::Tensor& x, int64_t length);

// The spec's score e(a, b) = a . b / sqrt(D) is a matmul times this factor, D the key dim.
double score_scale(int64_t head_dim);

// x [B, H, L, *] zero-padded to whole blocks of `size`: [B, H, ceil(L / size), size, *].
torch::Tensor to_blocks(const torch::Tensor& x, int64_t size);

// Shifts x by one along `dim`: towards higher indices when `forward` (out[t] = x[t-1]), else
// towards lower ones (out[t] = x[t+1]); the vacated slot is zero.
torch::Tensor shift_one(const torch::Tensor& x, int64_t dim, bool forward);

// Scores with -inf where `allowed` is false (allowed broadcasts against scores).
torch::Tensor masked(const torch::Tensor& scores, const torch::Tensor& allowed);

// Softmax over the last axis where every row has at least one allowed entry, or, for rows
// with none (spans that do not exist), any finite weights: callers give those rows zero weight.
torch::Tensor local_softmax(const torch::Tensor& scores, const torch::Tensor& allowed);

// One softmax over several score tensors that share all but the last axis; returns each part's
// weights. Masked entries are -inf; every row has at least one finite entry (the query itself).
std::vector<torch::Tensor> joint_softmax(const std::vector<torch::Tensor>& scores);

// [n, n] bool on `device`: entry (a, b) is b <= a (inclusive) or b < a (strict).
torch::Tensor causal_allowed(int64_t n, bool strict, torch::Device device);

}  // namespace combiner::attention
