// Shared by the attention tests: the grid of (variant, abstraction, L, s, W) cases and random
// inputs. B = 2, H = 2, D = 6, Dv = 5 (D != Dv on purpose).
#pragma once

#include <torch/torch.h>

#include "attention/attention.h"
#include "attention/plan.h"

#include <ostream>
#include <string>
#include <vector>

namespace combiner::attention::testing {

struct Case {
  std::string type;
  std::string abstraction;
  int64_t length;
  int64_t block;
  int64_t row_len;

  AttentionOptions options() const { return {type, block, row_len, abstraction}; }
};

inline std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.type << "/" << c.abstraction << "/L" << c.length << "_s" << c.block << "_W"
            << c.row_len;
}

inline std::string case_name(const Case& c) {
  std::string out = c.type + "_" + c.abstraction + "_L" + std::to_string(c.length) + "_s" +
                    std::to_string(c.block) + "_W" + std::to_string(c.row_len);
  for (auto& ch : out)
    if (ch == '-') ch = '_';
  return out;
}

// Every variant on (L, s, W) layouts including L not a power of two and a short last block;
// the sparse baselines and `full` ignore the abstraction, so they run with "max" only.
inline std::vector<Case> all_cases() {
  const std::vector<std::vector<int64_t>> layouts = {
      {12, 4, 4},
      {16, 4, 4},
      {20, 3, 5},
      {24, 5, 6},
      {64, 8, 8},
      // Degenerate layouts: one block per position and a single row; one huge block and
      // one-column rows.
      {8, 1, 8},
      {7, 9, 1}};
  std::vector<Case> out;
  for (const auto& layout : layouts)
    for (const auto& type : variant_names())
      for (const auto& abstraction : abstraction_names()) {
        if (!is_combiner(type) && abstraction != "max") continue;
        out.push_back({type, abstraction, layout[0], layout[1], layout[2]});
      }
  return out;
}

struct Inputs {
  torch::Tensor q, k, v;
};

inline constexpr int64_t kBatch = 2, kHeads = 2, kDim = 6, kValueDim = 5;

inline Inputs random_inputs(int64_t length, torch::ScalarType dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto opts = torch::dtype(dtype);
  return {torch::randn({kBatch, kHeads, length, kDim}, opts),
          torch::randn({kBatch, kHeads, length, kDim}, opts),
          torch::randn({kBatch, kHeads, length, kValueDim}, opts)};
}

}  // namespace combiner::attention::testing
