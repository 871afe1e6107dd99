// Span summaries shared by the Combiner variants: the optional DeepSets maps phi_Q, phi_K and
// the pooling (max or mean), whole-axis or cumulative. The learned maps are registered on the
// owning variant module ("phi_query", "phi_key": [D, D]) so checkpoints carry them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace combiner::attention {

// The inclusive running max of x along `dim` (from the end when `reverse`), differentiable in x.
// For its backward it keeps torch::cummax's arg-maxes (`keep_indices`: an int64 per element,
// four times a bfloat16 x's bytes; the CPU, where finding them again is a slow sequential scan)
// or x alone, finding them again in backward (a GPU, where memory is what runs out: x is mostly
// held anyway, as a view of k or q or a DeepSets map's output that its relu keeps).
torch::Tensor cumulative_max(const torch::Tensor& x, int64_t dim, bool reverse, bool keep_indices);

class SpanSummary {
 public:
  // `abstraction` is one of abstraction_names(). With a DeepSets abstraction, registers
  // phi_key (and phi_query when `with_query`) on `owner`, each a [D, D] matrix.
  SpanSummary(torch::nn::Module& owner,
              const std::string& abstraction,
              int64_t head_dim,
              bool with_query);

  // x: [..., D] -> [..., D]; identity unless DeepSets: relu(x W^T).
  torch::Tensor phi_query(const torch::Tensor& x) const;
  torch::Tensor phi_key(const torch::Tensor& x) const;

  // Pools x over `dim` (max or mean), removing it.
  torch::Tensor pool(const torch::Tensor& x, int64_t dim) const;
  // Inclusive cumulative pool along `dim`; from the end when `reverse`. The max is
  // cumulative_max, keeping its indices as asked, or by default on the CPU and not on a GPU.
  torch::Tensor cumulative(const torch::Tensor& x, int64_t dim, bool reverse) const {
    return cumulative(x, dim, reverse, /*keep_indices=*/!x.is_cuda());
  }
  torch::Tensor cumulative(const torch::Tensor& x,
                           int64_t dim,
                           bool reverse,
                           bool keep_indices) const;

  bool is_max() const { return max_; }
  // Whether phi is the identity on both sides (max or mean, no DeepSets map).
  bool plain() const { return !w_query_.defined() && !w_key_.defined(); }

  // Whether the query (or key) side's summaries of a bfloat16 x computed in bfloat16 are the
  // float32 ones exactly, values and gradients: max pools with no DeepSets map (a max picks one
  // of its inputs; its gradient goes to the one picked). The fused path then pools its operands
  // directly instead of a float32 copy of them.
  bool exact_in_input_dtype(bool query_side) const {
    return max_ && !(query_side ? w_query_ : w_key_).defined();
  }

 private:
  bool max_ = true;
  torch::Tensor w_query_;  // undefined unless DeepSets
  torch::Tensor w_key_;
};

}  // namespace combiner::attention
