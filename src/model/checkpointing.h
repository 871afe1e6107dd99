// Activation checkpointing of one block (or of its MLP half): the forward pass keeps only the
// input; the backward pass runs the block (or the half) again (same dropout masks, same autocast
// state) and back-propagates through that recomputation. Memory per block drops from every
// intermediate to one [B, L, width] tensor, for about one extra block forward in compute. A whole
// block replays its masks by setting the generator back to its state before the forward; the MLP
// half keeps its one mask instead.
#pragma once

#include <torch/torch.h>

#include "model/transformer.h"

namespace combiner::model {

// y = block(x), with the block's activations recomputed in backward instead of stored.
torch::Tensor checkpointed_forward(BlockImpl& block, const torch::Tensor& x);

// y = block.mlp_half(x + branch) for the attention half's branch (block.attention_branch(x)), the
// same for the MLP half alone (selective recomputation): of the attention half's activations
// nothing is recomputed, of the MLP's (h's LayerNorm, both linears' inputs, GELU's input) only
// h = x + branch is kept, with the dropout draw made in the forward (on CUDA a mask of one byte
// an element). The forward adds the residual in the LayerNorm's pass (LayerNormImpl::
// add_forward), as Block::forward does. Nothing sets a generator's state, so a CUDA graph can
// capture it.
torch::Tensor checkpointed_mlp(BlockImpl& block,
                               const torch::Tensor& x,
                               const torch::Tensor& branch);

}  // namespace combiner::model
