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

namespace combiner::attention {
namespace {

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
  return out;
}

constexpr int64_t kB = 2, kH = 2, kD = 8;

double max_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

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
    EXPECT_LT(max_error(fused.out, composed.out), out_tol);
    EXPECT_LT(max_error(fused.dq, composed.dq), grad_tol);
    EXPECT_LT(max_error(fused.dk, composed.dk), grad_tol);
    EXPECT_LT(max_error(fused.dv, composed.dv), grad_tol);
    ASSERT_EQ(fused.dparams.size(), composed.dparams.size());
    for (size_t i = 0; i < fused.dparams.size(); ++i)
      EXPECT_LT(max_error(fused.dparams[i], composed.dparams[i]), grad_tol) << "parameter " << i;
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
  EXPECT_LT(max_error(out, head(ref)), 1e-5);
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
    EXPECT_LT(max_error(o, ref), 1e-12) << "L " << L << " s " << s;
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_LT(max_error(grads[i], ref_grads[i]), 1e-11) << "input " << i << ", L " << L;
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
  EXPECT_EQ(fused_cuda_unavailable(q, q), "CPU tensors");
}

}  // namespace
}  // namespace combiner::attention
