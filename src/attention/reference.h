// The dense reference: the explicit effective attention matrix A of docs/ATTENTION.md, built
// position by position from the plans (plan.h) in float64. Slow and obvious; for tests and the
// inspector only, never for training.
#pragma once

#include <torch/torch.h>

#include "attention/attention.h"
#include "attention/plan.h"

#include <vector>

namespace combiner::attention {

// The DeepSets maps phi(x) = relu(W x); an undefined tensor means the identity.
struct DeepSetsMaps {
  torch::Tensor query;  // [D, D]
  torch::Tensor key;    // [D, D]
};

// The maps a module registered ("phi_query", "phi_key"); undefined where it has none.
DeepSetsMaps deepsets_maps(const AttentionImpl& module);

// One [B, H, L, L] float64 matrix per plan (plan_names(options.type) order), from
// q, k: [B, H, L, D]. `options` must be validated for L.
std::vector<torch::Tensor> plan_matrices(const AttentionOptions& options,
                                         const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const DeepSetsMaps& maps);

// A = the mean of the plan matrices: [B, H, L, L] float64.
torch::Tensor effective_matrix(const AttentionOptions& options,
                               const torch::Tensor& q,
                               const torch::Tensor& k,
                               const DeepSetsMaps& maps);

// o = A v in float64, v: [B, H, L, Dv] -> [B, H, L, Dv]; with the module's own DeepSets maps.
torch::Tensor reference_attention(const AttentionOptions& options,
                                  const AttentionImpl& module,
                                  const torch::Tensor& q,
                                  const torch::Tensor& k,
                                  const torch::Tensor& v);

}  // namespace combiner::attention
