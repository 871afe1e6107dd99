// Each variant's attention pattern, stated once: for position i, the positions it attends
// directly and the spans it sees through summaries. The dense reference (reference.h), the tests
// and the inspector read these; the fast paths are checked against them.
#pragma once

#include "attention/options.h"

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::attention {

struct Span {
  std::vector<int64_t> positions;  // ascending, non-empty
  // -1: the local query is the pooled query of the span. Otherwise the local query is q at this
  // position (combiner-axial-rowmajor: the same column in the span's row).
  int64_t query_position = -1;
};

struct PositionPlan {
  // Combiner variants: Omega_i^0. Sparse baselines and `full`: the whole support S_i.
  std::vector<int64_t> direct;  // ascending, contains i
  std::vector<Span> spans;      // empty for the sparse baselines and `full`
};

using Plan = std::vector<PositionPlan>;  // one entry per position 0..L-1

// Whether `type` is a Combiner variant (full support through spans) or a sparse baseline.
bool is_combiner(const std::string& type);

// The names of the plans a variant is made of: itself, or for combiner-mixture
// {combiner-axial-vertical, combiner-axial-horizontal}, averaged.
std::vector<std::string> plan_names(const std::string& type);

// The plan of one position for a single-plan variant name (not combiner-mixture).
PositionPlan plan_position(
    const std::string& plan_name, int64_t i, int64_t length, int64_t block, int64_t row_len);

// Every plan of a validated configuration, in plan_names() order.
std::vector<Plan> make_plans(const AttentionOptions& options, int64_t length);

}  // namespace combiner::attention
