// The fused kernels' CPU model (attention/fused/kernel_cpu.cpp, the algorithm the CUDA kernels
// run) through the fused path of combiner-fixed and the axial Combiner variants (rowmajor,
// vertical, horizontal, mixture): outputs and the gradients of q, k, v and the DeepSets maps
// against the LibTorch composition (float64 and float32) and the dense reference; the joint
// passes' summary gradients against their LibTorch composition; short last blocks and rows,
// blocks and rows longer than one 64-row tile, more than 64 blocks or rows (a second summary
// tile, several summary-gradient parts, long columns).
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/fused/fused.h"
#include "attention/fused/reference.h"
#include "attention/reference.h"
#include "attention/span_ops.h"
#include "tensor_checks.h"

namespace combiner::attention {
namespace {

using combiner::testing::max_abs_diff;

struct FusedCase {
  std::string type, abstraction;
  int64_t length, input_length, layout;
};

void PrintTo(const FusedCase& c, std::ostream* os) {
  *os << c.type << "/" << c.abstraction << "/L" << c.input_length << "/s" << c.layout;
}

std::string fused_case_name(const FusedCase& c) {
  std::string out = c.type + "_" + c.abstraction + "_L" + std::to_string(c.input_length) + "_of" +
                    std::to_string(c.length) + "_s" + std::to_string(c.layout);
  for (auto& ch : out)
    if (ch == '-') ch = '_';
  return out;
}

std::vector<FusedCase> fused_cases() {
  // {length, input length, layout}: a short last block, one block only, blocks over 64 rows;
  // a short last row (prefix), a single row, rows over 64 (vertical: its span pass, mask c != c',
  // over two key tiles that every query tile sees), rows of one column.
  const std::vector<std::pair<std::string, std::vector<int64_t>>> layouts = {
      {"combiner-fixed", {20, 20, 3}},
      {"combiner-fixed", {70, 70, 70}},
      {"combiner-fixed", {200, 200, 130}},
      {"combiner-axial-rowmajor", {168, 150, 24}},
      {"combiner-axial-rowmajor", {8, 8, 8}},
      {"combiner-axial-rowmajor", {260, 260, 130}},
      {"combiner-axial-vertical", {168, 150, 24}},
      {"combiner-axial-vertical", {8, 8, 8}},
      {"combiner-axial-vertical", {260, 260, 130}},
      {"combiner-axial-vertical", {12, 12, 1}},
      {"combiner-axial-horizontal", {168, 150, 24}},
      {"combiner-axial-horizontal", {8, 8, 8}},
      {"combiner-axial-horizontal", {260, 260, 130}},
      {"combiner-axial-horizontal", {12, 12, 1}},
      {"combiner-mixture", {168, 150, 24}},
      {"combiner-mixture", {260, 260, 130}}};
  std::vector<FusedCase> out;
  for (const auto& [type, l] : layouts)
    for (const auto& abstraction : abstraction_names())
      out.push_back({type, abstraction, l[0], l[1], l[2]});
  // More than 64 rows (columns of 66 queries: a second query chunk and key tile for the column
  // and span passes), one abstraction each to keep the run short.
  out.push_back({"combiner-axial-vertical", "deepsets-max", 1584, 1584, 24});
  out.push_back({"combiner-axial-horizontal", "mean", 1584, 1584, 24});
  // The running max pools the local passes make at the edges of a tile (the max abstraction):
  // rows of 65 (the W - 1 columns read, one tile) and of 66 (two, the second one column), a
  // short last row; columns of 66 rows (two tiles, the second two rows), a short last row.
  out.push_back({"combiner-axial-horizontal", "max", 195, 195, 65});
  out.push_back({"combiner-axial-horizontal", "max", 198, 190, 66});
  out.push_back({"combiner-axial-vertical", "max", 268, 262, 4});
  out.push_back({"combiner-mixture", "max", 198, 190, 66});
  return out;
}

constexpr int64_t kB = 2, kH = 2, kD = 8;

struct Outcome {
  torch::Tensor out, dq, dk, dv;
  std::vector<torch::Tensor> dparams;
};

Outcome run(AttentionImpl& m,
            AttentionImpl::Path path,
            const std::vector<torch::Tensor>& in,
            const torch::Tensor& g) {
  auto q = in[0].clone().requires_grad_(), k = in[1].clone().requires_grad_(),
       v = in[2].clone().requires_grad_();
  m.zero_grad();
  m.set_path(path);
  Outcome o;
  o.out = m.forward(q, k, v);
  o.out.backward(g);
  o.dq = q.grad();
  o.dk = k.grad();
  o.dv = v.grad();
  for (const auto& p : m.parameters())  // unused maps (one block only) have no gradient
    o.dparams.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return o;
}

class FusedModelTest : public ::testing::TestWithParam<FusedCase> {
 protected:
  std::shared_ptr<AttentionImpl> make(torch::ScalarType dtype) {
    const auto& c = GetParam();
    torch::manual_seed(31);
    auto m = make_attention({c.type, c.layout, c.layout, c.abstraction}, c.length, kD);
    m->to(dtype);
    return m;
  }
  std::vector<torch::Tensor> inputs(torch::ScalarType dtype, uint64_t seed) {
    torch::manual_seed(seed);
    const int64_t L = GetParam().input_length;
    return {torch::randn({kB, kH, L, kD}, dtype),
            torch::randn({kB, kH, L, kD}, dtype),
            torch::randn({kB, kH, L, kD}, dtype),
            torch::randn({kB, kH, L, kD}, dtype)};
  }
  void compare(torch::ScalarType dtype, double out_tol, double grad_tol) {
    auto m = make(dtype);
    ASSERT_TRUE(m->has_fused_kernel());
    auto in = inputs(dtype, 41);
    auto fused = run(*m, AttentionImpl::Path::kFused, in, in[3]);
    auto composed = run(*m, AttentionImpl::Path::kComposed, in, in[3]);
    ASSERT_EQ(fused.out.sizes(), composed.out.sizes());
    ASSERT_EQ(fused.out.scalar_type(), dtype);
    // Laid out as [B, L, H, D], as SDPA's output (the mixture's mean as its calls'): merging the
    // heads is a view.
    EXPECT_TRUE(fused.out.transpose(1, 2).is_contiguous()) << fused.out.strides();
    EXPECT_LT(max_abs_diff(fused.out, composed.out), out_tol);
    EXPECT_LT(max_abs_diff(fused.dq, composed.dq), grad_tol);
    EXPECT_LT(max_abs_diff(fused.dk, composed.dk), grad_tol);
    EXPECT_LT(max_abs_diff(fused.dv, composed.dv), grad_tol);
    ASSERT_EQ(fused.dparams.size(), composed.dparams.size());
    for (size_t i = 0; i < fused.dparams.size(); ++i)
      EXPECT_LT(max_abs_diff(fused.dparams[i], composed.dparams[i]), grad_tol) << "parameter " << i;
  }
};

TEST_P(FusedModelTest, MatchesComposedInFloat64) {
  compare(torch::kDouble, 1e-12, 1e-11);
}

TEST_P(FusedModelTest, MatchesComposedInFloat32) {
  compare(torch::kFloat, 2e-6, 2e-5);
}

// A prefix input (a short last row) against the reference over the module's whole length: an
// output depends only on earlier positions.
TEST_P(FusedModelTest, MatchesDenseReference) {
  const auto& c = GetParam();
  auto m = make(torch::kFloat);
  torch::manual_seed(43);
  std::vector<torch::Tensor> full;
  for (int i = 0; i < 3; ++i) full.push_back(torch::randn({kB, kH, c.length, kD}));
  auto head = [&](const torch::Tensor& x) { return x.narrow(2, 0, c.input_length); };
  m->set_path(AttentionImpl::Path::kFused);
  auto out = m->forward(head(full[0]), head(full[1]), head(full[2]));
  auto ref = reference_attention(
      {c.type, c.layout, c.layout, c.abstraction}, *m, full[0], full[1], full[2]);
  EXPECT_LT(max_abs_diff(out, head(ref)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(CpuModel,
                         FusedModelTest,
                         ::testing::ValuesIn(fused_cases()),
                         [](const auto& info) { return fused_case_name(info.param); });

// The joint passes alone, random summaries: o and every gradient, ks and u included.
TEST(FusedJointTest, SummaryGradientsMatchComposition) {
  using Reference = torch::Tensor (*)(const torch::Tensor&,
                                      const torch::Tensor&,
                                      const torch::Tensor&,
                                      const torch::Tensor&,
                                      const torch::Tensor&,
                                      int64_t);
  struct Joint {
    std::vector<FusedPass> (*passes)(int64_t, int64_t);
    Reference reference;
    int64_t ks_per_row, u_per_row;  // ks, u rows per span: 0 = one, else this many W (fused.h)
  };
  const Joint fixed{fixed_joint_passes, joint_fixed_reference, 0, 0},
      rowmajor{rowmajor_joint_passes, joint_rowmajor_reference, 0, 1},
      vertical{vertical_joint_passes, joint_vertical_reference, 1, 1},
      horizontal{horizontal_joint_passes, joint_horizontal_reference, 2, 2};
  // {joint, L, s}; the last four: more than 64 summaries in two gradient parts, columns of 66
  // queries (fused/kernel.h).
  const std::vector<std::tuple<Joint, int64_t, int64_t>> cases = {{fixed, 20, 3},
                                                                  {fixed, 150, 70},
                                                                  {rowmajor, 21, 5},
                                                                  {rowmajor, 200, 100},
                                                                  {vertical, 21, 5},
                                                                  {vertical, 200, 100},
                                                                  {horizontal, 21, 5},
                                                                  {horizontal, 200, 100},
                                                                  {fixed, 1600, 24},
                                                                  {rowmajor, 1584, 24},
                                                                  {vertical, 1584, 24},
                                                                  {horizontal, 1584, 24}};
  for (const auto& [joint, L, s] : cases) {
    torch::manual_seed(L);
    const int64_t spans = (L + s - 1) / s - 1;
    auto draw = [&](int64_t rows) {
      return torch::randn({kB, kH, rows, kD}, torch::kDouble).requires_grad_();
    };
    auto summary_rows = [&](int64_t per_row) { return per_row == 0 ? spans : per_row * spans * s; };
    std::vector<torch::Tensor> in = {draw(L),
                                     draw(L),
                                     draw(L),
                                     draw(summary_rows(joint.ks_per_row)),
                                     draw(summary_rows(joint.u_per_row))};
    auto g = torch::randn({kB, kH, L, kD}, torch::kDouble);
    auto o =
        fused_attention(in[0], in[1], in[2], in[3], in[4], joint.passes(L, s), score_scale(kD));
    auto grads = torch::autograd::grad({o}, in, {g});
    auto ref = joint.reference(in[0], in[1], in[2], in[3], in[4], s);
    auto ref_grads = torch::autograd::grad({ref}, in, {g});
    EXPECT_LT(max_abs_diff(o, ref), 1e-12) << "L " << L << " s " << s;
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_LT(max_abs_diff(grads[i], ref_grads[i]), 1e-11) << "input " << i << ", L " << L;
  }
}

// The local passes of the axial variants over L = spans x W + a last row (fused_axial.cpp), and
// combiner-fixed's with s = W: vertical's causal pass down the columns, horizontal's prefix pass
// and right-to-left suffix pass into the two halves of u, rowmajor's over q itself (unmasked),
// fixed's pooled query per block (unmasked).
struct LocalPasses {
  FusedPass column, prefix, suffix, row, block;
};
LocalPasses local_passes(int64_t L, int64_t W) {
  const int64_t spans = (L + W - 1) / W - 1, rows = spans * W;
  LocalPasses p;
  p.column.query = p.column.key = p.column.value = {W, spans, 1, W, rows};
  p.prefix.query = {spans, W, W, 1, 2 * rows};
  p.prefix.key = p.prefix.value = {spans, W, W, 1, rows};
  p.suffix.query = {spans, W, W, -1, 2 * rows, rows + W - 1};
  p.suffix.key = p.suffix.value = {spans, W, W, -1, rows, W - 1};
  p.row.query = {spans, W, W, 1, rows};
  p.row.key = p.row.value = {spans, W, W, 1, rows};
  p.row.mask = fused::Mask::kNone;
  p.block.query = {spans, 1, 1, 1, spans};
  p.block.key = p.block.value = {spans, W, W, 1, rows};
  p.block.mask = fused::Mask::kNone;
  return p;
}

// fused_attention_with_local against the two calls it replaces (u made by its own
// fused_attention, then the joint passes reading it): o and the gradients of q, k, v and qs, in
// float64. A local stage over qs (vertical: one causal pass down the columns; horizontal: a
// prefix pass and a right-to-left suffix pass into the two halves of u) and one over q itself
// (rowmajor: the rows before the last, u as many rows).
TEST(FusedJointTest, LocalStageInOneCallMatchesTwoCalls) {
  const int64_t L = 150, W = 24, n = (L + W - 1) / W, spans = n - 1, rows = spans * W;
  const double scale = score_scale(kD);
  torch::manual_seed(5);
  auto draw = [&](int64_t r) {
    return torch::randn({kB, kH, r, kD}, torch::kDouble).requires_grad_();
  };
  auto q = draw(L), k = draw(L), v = draw(L), g = torch::randn({kB, kH, L, kD}, torch::kDouble);
  auto head = [&](const torch::Tensor& x) { return x.narrow(2, 0, rows); };
  struct Plan {
    std::vector<FusedPass> local, joint;
    int64_t u_rows;  // 0: the local queries are q itself
    int64_t ks_rows;
  };
  const auto passes = local_passes(L, W);
  const std::vector<Plan> plans = {
      {{passes.column}, vertical_joint_passes(L, W), rows, rows},
      {{passes.prefix, passes.suffix}, horizontal_joint_passes(L, W), 2 * rows, 2 * rows},
      {{passes.row}, rowmajor_joint_passes(L, W), 0, spans}};
  for (const auto& plan : plans) {
    const bool own_queries = plan.u_rows > 0;
    auto qs = own_queries ? draw(plan.u_rows) : torch::Tensor();
    auto ks = draw(plan.ks_rows);
    std::vector<torch::Tensor> in = {q, k, v, ks};
    if (own_queries) in.push_back(qs);
    auto o = fused_attention_with_local(q, k, v, ks, qs, plan.local, plan.joint, scale);
    auto grads = torch::autograd::grad({o}, in, {g});
    // Two calls: u from fused_attention over (qs or q, k, v), one per local pass over its own
    // queries (a pass of a call covers every query row), then the joint passes reading u.
    std::vector<torch::Tensor> parts;
    for (auto p : plan.local) {
      const int64_t first = p.query.row_stride < 0 ? p.query.first - (W - 1) : p.query.first;
      p.query.first -= first;
      p.query.limit = rows;
      const auto& queries = own_queries ? qs : q;
      parts.push_back(
          fused_attention(queries.narrow(2, first, rows), head(k), head(v), {}, {}, {p}, scale));
    }
    auto u = torch::cat(parts, 2);
    auto ref = fused_attention(q, k, v, ks, u, plan.joint, scale);
    auto ref_grads = torch::autograd::grad({ref}, in, {g});
    EXPECT_LT(max_abs_diff(o, ref), 1e-12) << plan.local.size() << " local passes";
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_LT(max_abs_diff(grads[i], ref_grads[i]), 1e-11) << "input " << i;
  }
}

// Max pools made in the call (FusedPool: their backward adds into k's and q's gradients in place)
// against the same pools as their own autograd ops, given as ks and qs: o and the projection's
// gradient, float32, with q, k and v strided views of one [B, L, 3 x H x D] projection as the
// model makes them. Per variant's pools: vertical's running max down the columns (both sides),
// horizontal's prefix and suffix running maxes (two pools per slot, the suffix from row
// spans x W), fixed's whole-block max (both sides) and rowmajor's whole-row max (k only).
TEST(FusedJointTest, PoolsInTheCallMatchThePoolOps) {
  const int64_t L = 150, W = 24, spans = (L + W - 1) / W - 1, rows = spans * W;
  const double scale = score_scale(kD);
  using Kind = FusedPool::Kind;
  // The slot a side's pools make, from the standalone ops.
  const auto given =
      [&](const std::vector<FusedPool>& pools, bool query_side, const torch::Tensor& x) {
        std::vector<torch::Tensor> parts;
        for (const auto& p : pools) {
          if (p.query_side != query_side) continue;
          if (p.kind == Kind::kSegmentMax) {
            parts.push_back(fused_segment_max(x, p.segments, p.len));
          } else {
            const auto y = fused_running_max_of_segments(x, p.segments, p.len, p.dim, p.reverse);
            parts.push_back(y.reshape({x.size(0), x.size(1), p.segments * p.len, x.size(3)}));
          }
        }
        return parts.empty() ? torch::Tensor() : torch::cat(parts, 2);
      };
  const auto passes = local_passes(L, W);
  struct Plan {
    std::string name;
    std::vector<FusedPool> pools;
    std::vector<FusedPass> local, joint;
  };
  const std::vector<Plan> plans = {
      {"vertical",
       {FusedPool::running_max(false, spans, W, 2, false, 0),
        FusedPool::running_max(true, spans, W, 2, false, 0)},
       {passes.column},
       vertical_joint_passes(L, W)},
      {"horizontal",
       {FusedPool::running_max(false, spans, W, 3, false, 0),
        FusedPool::running_max(false, spans, W, 3, true, rows),
        FusedPool::running_max(true, spans, W, 3, false, 0),
        FusedPool::running_max(true, spans, W, 3, true, rows)},
       {passes.prefix, passes.suffix},
       horizontal_joint_passes(L, W)},
      {"fixed",
       {FusedPool::segment_max(false, spans, W), FusedPool::segment_max(true, spans, W)},
       {passes.block},
       fixed_joint_passes(L, W)},
      {"rowmajor",
       {FusedPool::segment_max(false, spans, W)},
       {passes.row},
       rowmajor_joint_passes(L, W)}};
  for (const auto& plan : plans) {
    torch::manual_seed(9);
    auto projection = torch::randn({kB, L, 3 * kH * kD}).requires_grad_();
    const auto g = torch::randn({kB, kH, L, kD});
    const auto qkv = projection.view({kB, L, 3, kH, kD}).permute({2, 0, 3, 1, 4});
    const auto q = qkv[0], k = qkv[1], v = qkv[2];
    ASSERT_FALSE(k.is_contiguous());
    const auto o =
        fused_attention_with_local(q, k, v, {}, {}, plan.local, plan.joint, scale, plan.pools);
    const auto d = torch::autograd::grad({o}, {projection}, {g})[0];
    const auto ks = given(plan.pools, false, k), qs = given(plan.pools, true, q);
    const auto ref = fused_attention_with_local(q, k, v, ks, qs, plan.local, plan.joint, scale);
    const auto d_ref = torch::autograd::grad({ref}, {projection}, {g})[0];
    EXPECT_LT(max_abs_diff(o, ref), 1e-6) << plan.name;
    EXPECT_LT(max_abs_diff(d, d_ref), 1e-5) << plan.name;
    EXPECT_GT(d.abs().sum().item<double>(), 0) << plan.name;
  }
}

TEST(FusedJointTest, BadPoolsGiveOneLineErrors) {
  auto q = torch::randn({1, 1, 8, 4});
  FusedPass local;
  local.query = {2, 1, 1, 1, 2};
  local.key = local.value = {2, 4, 4, 1, 8};
  local.mask = fused::Mask::kNone;
  FusedPool pool;
  pool.segments = 2;
  pool.len = 4;
  auto expect_error = [&](const torch::Tensor& ks,
                          const std::vector<FusedPool>& pools,
                          const std::string& what) {
    try {
      fused_attention_with_local(q, q, q, ks, {}, {local}, fixed_joint_passes(8, 4), 0.5, pools);
      FAIL() << what << ": accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(what), std::string::npos)
          << e.what_without_backtrace();
    }
  };
  auto ks = torch::randn({1, 1, 2, 4});
  expect_error(ks, {pool}, "ks is both given and pooled");
  expect_error({}, {pool, pool}, "two pools write row 0 of ks");
  FusedPool too_long = pool;
  too_long.segments = 3;
  expect_error({}, {too_long}, "a pool of 3 segments of 4 rows from row 0 does not fit 8 rows");
  FusedPool sideways = pool;
  sideways.kind = FusedPool::Kind::kRunningMax;
  sideways.dim = 4;
  expect_error({}, {sideways}, "a running max pool runs along dim 2 or 3, got 4");
}

TEST(FusedJointTest, BadLocalStagesGiveOneLineErrors) {
  auto q = torch::randn({1, 1, 8, 4});
  FusedPass local;
  local.query = local.key = local.value = {2, 4, 4, 1, 8};
  FusedPass twice = local;
  auto expect_error = [&](const std::vector<FusedPass>& plan, const std::string& what) {
    try {
      fused_attention_with_local(q, q, q, {}, q, plan, fixed_joint_passes(8, 8), 0.5);
      FAIL() << what << ": accepted";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(what), std::string::npos)
          << e.what_without_backtrace();
    }
  };
  expect_error({local, twice}, "two local queries write the same row of u");
  FusedPass summaries = local;
  summaries.a_from_summaries = true;
  expect_error({summaries}, "a local pass reads no summaries");
  FusedPass short_limit = local;
  short_limit.query.limit = 6;
  expect_error({short_limit}, "a local pass's queries end at 6, u has 8 rows");
  expect_error({}, "a local stage needs at least one pass");
  // Local queries read from q itself (no qs): u has their rows, which must be rows of q.
  FusedPass past_q = local;
  past_q.query = {3, 4, 4, 1, 12};
  try {
    fused_attention_with_local(q, q, q, {}, {}, {past_q}, fixed_joint_passes(8, 8), 0.5);
    FAIL() << "local queries past q's rows accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace())
                  .find("local query of q rows end at 12 but the tensor has 8"),
              std::string::npos)
        << e.what_without_backtrace();
  }
}

TEST(FusedJointTest, BadInputsGiveOneLineErrors) {
  auto q = torch::randn({1, 1, 8, 4}), v5 = torch::randn({1, 1, 8, 5});
  try {
    fused_attention(q, q, v5, {}, {}, rowmajor_joint_passes(8, 4), 0.5);
    FAIL() << "D != Dv accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("D == Dv"), std::string::npos);
  }
  try {
    auto h = q.to(torch::kHalf);
    fused_attention(h, h, h, {}, {}, fixed_joint_passes(8, 8), 0.5);
    FAIL() << "float16 accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace()).find("float32, bfloat16 or float64, got Half"),
        std::string::npos)
        << e.what_without_backtrace();
  }
  try {
    fused_attention(q, q, q, {}, {}, fixed_joint_passes(8, 8), -0.5);
    FAIL() << "a negative scale accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what_without_backtrace()).find("score scale must be positive, got -0.5"),
        std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_EQ(fused_cuda_unavailable(q, q), "CPU tensors");
}

}  // namespace
}  // namespace combiner::attention
