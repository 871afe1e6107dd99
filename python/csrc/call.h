// The operator's arguments checked once for every kernel (CPU, CUDA, Meta), and the variant's
// module built from them: the trainer's own make_attention(), given the DeepSets maps passed in.
#pragma once

#include <torch/torch.h>

#include "attention/attention.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace combiner::attention::op {

using MaybeTensor = std::optional<torch::Tensor>;

inline constexpr const char* kMapNames[] = {"phi_query", "phi_key"};

std::string text(c10::string_view s);

// validate() for L (its messages with the operator's argument names), and no block / row_len
// where the variant reads none. Throws c10::ValueError (Python's ValueError).
void check_options(const AttentionOptions& o, int64_t length);

// The variant's module for L and D, its maps as drawn; the caller's random stream is left alone.
std::shared_ptr<AttentionImpl> make_module(const AttentionOptions& o, int64_t L, int64_t D);

// The names of the maps the module learns, in kMapNames order.
std::vector<std::string> learned_map_names(const AttentionImpl& module);

// The operator's arguments, checked. Shapes are compared as SymInts (the Meta kernels see
// symbolic shapes under torch.compile); L and D become concrete for validate() and the module.
struct Call {
  AttentionOptions options;
  int64_t L = 0, D = 0;
  MaybeTensor maps[2];                    // phi_query, phi_key
  std::shared_ptr<AttentionImpl> module;  // the variant's, maps not yet bound
  bool empty = false;                     // B, H or Dv is 0: nothing to compute
};

// Throws one line naming the argument (ValueError: shapes, options, devices, the maps;
// TypeError: dtypes) for q, k [B, H, L, D], v [B, H, L, Dv] and the maps the variant learns.
Call checked(const torch::Tensor& q,
             const torch::Tensor& k,
             const torch::Tensor& v,
             c10::string_view variant,
             int64_t block,
             int64_t row_len,
             c10::string_view abstraction,
             const MaybeTensor& phi_query,
             const MaybeTensor& phi_key);

// The module's maps become the given tensors' values (set_data: the module's parameters stay
// its own leaves, so backward's autograd::grad differentiates with respect to them).
void bind_maps(const Call& call);

}  // namespace combiner::attention::op
