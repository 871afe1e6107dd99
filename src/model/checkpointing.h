// Activation checkpointing of one block: the forward pass keeps only the block's input; the
// backward pass runs the block again (same dropout masks, same autocast state) and
// back-propagates through that recomputation. Memory per block drops from every intermediate
// to one [B, L, width] tensor, for about one extra block forward in compute.
#pragma once

#include <torch/torch.h>

#include "model/transformer.h"

namespace combiner::model {

// y = block(x), with the block's activations recomputed in backward instead of stored.
torch::Tensor checkpointed_forward(BlockImpl& block, const torch::Tensor& x);

}  // namespace combiner::model
