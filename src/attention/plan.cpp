// The definitions of docs/ATTENTION.md, one small function per pattern, per position.
#include "attention/plan.h"

#include <algorithm>
#include <stdexcept>

namespace combiner::attention {

namespace {
std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t j = begin; j < end; ++j) out.push_back(j);
  return out;
}

// Positions j <= i with pred(j), ascending.
template <typename Pred>
std::vector<int64_t> up_to(int64_t i, Pred pred) {
  std::vector<int64_t> out;
  for (int64_t j = 0; j <= i; ++j)
    if (pred(j)) out.push_back(j);
  return out;
}

// Fenwick spans of [0, i), highest bit first: [begin, end) pairs.
std::vector<std::pair<int64_t, int64_t>> fenwick_spans(int64_t i) {
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t m = 62; m >= 0; --m) {
    if ((i >> m) & 1) {
      out.emplace_back(begin, begin + (int64_t(1) << m));
      begin += int64_t(1) << m;
    }
  }
  return out;
}

std::vector<int64_t> axial_support(int64_t i, int64_t W) {
  return up_to(i, [&](int64_t j) { return j / W == i / W || j % W == i % W; });
}

PositionPlan fixed(int64_t i, int64_t s) {
  return {up_to(i, [&](int64_t j) { return j / s == i / s || j % s == s - 1; }), {}};
}

PositionPlan logsparse(int64_t i) {
  PositionPlan plan;
  for (auto [begin, end] : fenwick_spans(i)) plan.direct.push_back(end - 1);
  plan.direct.push_back(i);
  return plan;
}

PositionPlan combiner_fixed(int64_t i, int64_t s) {
  PositionPlan plan{up_to(i, [&](int64_t j) { return j / s == i / s; }), {}};
  for (int64_t b = 0; b < i / s; ++b) plan.spans.push_back({range(b * s, (b + 1) * s)});
  return plan;
}

PositionPlan combiner_logsparse(int64_t i) {
  PositionPlan plan{{i}, {}};
  for (auto [begin, end] : fenwick_spans(i)) plan.spans.push_back({range(begin, end)});
  return plan;
}

PositionPlan vertical(int64_t i, int64_t W) {
  PositionPlan plan{axial_support(i, W), {}};
  const int64_t row = i / W, col = i % W;
  for (int64_t c = 0; c < W && row > 0; ++c) {
    if (c == col) continue;
    Span span;
    for (int64_t r = 0; r < row; ++r) span.positions.push_back(r * W + c);
    plan.spans.push_back(span);
  }
  return plan;
}

PositionPlan horizontal(int64_t i, int64_t W) {
  PositionPlan plan{axial_support(i, W), {}};
  const int64_t row = i / W, col = i % W;
  for (int64_t r = 0; r < row; ++r) {
    if (col > 0) plan.spans.push_back({range(r * W, r * W + col)});
    if (col < W - 1) plan.spans.push_back({range(r * W + col + 1, (r + 1) * W)});
  }
  return plan;
}

PositionPlan rowmajor(int64_t i, int64_t W) {
  const int64_t row = i / W, col = i % W;
  PositionPlan plan{range(row * W, i + 1), {}};
  for (int64_t r = 0; r < row; ++r) plan.spans.push_back({range(r * W, (r + 1) * W), r * W + col});
  return plan;
}
}  // namespace

bool is_combiner(const std::string& type) {
  return type.rfind("combiner-", 0) == 0;
}

std::vector<std::string> plan_names(const std::string& type) {
  if (type == "combiner-mixture") return {"combiner-axial-vertical", "combiner-axial-horizontal"};
  return {type};
}

PositionPlan plan_position(
    const std::string& plan_name, int64_t i, int64_t length, int64_t block, int64_t row_len) {
  if (plan_name == "full") return {range(0, i + 1), {}};
  if (plan_name == "fixed") return fixed(i, block);
  if (plan_name == "logsparse") return logsparse(i);
  if (plan_name == "axial") return {axial_support(i, row_len), {}};
  if (plan_name == "combiner-fixed") return combiner_fixed(i, block);
  if (plan_name == "combiner-logsparse") return combiner_logsparse(i);
  if (plan_name == "combiner-axial-vertical") return vertical(i, row_len);
  if (plan_name == "combiner-axial-horizontal") return horizontal(i, row_len);
  if (plan_name == "combiner-axial-rowmajor") return rowmajor(i, row_len);
  throw std::invalid_argument("attention plan: no single plan named '" + plan_name + "'");
}

std::vector<Plan> make_plans(const AttentionOptions& options, int64_t length) {
  std::vector<Plan> plans;
  for (const auto& name : plan_names(options.type)) {
    Plan plan;
    for (int64_t i = 0; i < length; ++i)
      plan.push_back(plan_position(name, i, length, options.block, options.row_len));
    plans.push_back(std::move(plan));
  }
  return plans;
}

}  // namespace combiner::attention
