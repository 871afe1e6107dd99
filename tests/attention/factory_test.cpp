// The factory and validate(): every name builds, bad configurations throw naming their key,
// and the DeepSets maps are registered parameters.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/plan.h"

#include <stdexcept>
#include <string>

namespace combiner::attention {
namespace {

// Runs validate() and returns the std::invalid_argument message ("" when it does not throw).
std::string validation_error(const AttentionOptions& options, int64_t length) {
  try {
    validate(options, length);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

TEST(AttentionFactory, BuildsEveryVariantAndAbstraction) {
  EXPECT_EQ(variant_names().size(), 10u);
  for (const auto& type : variant_names())
    for (const auto& abstraction : abstraction_names()) {
      auto module = make_attention({type, 4, 4, abstraction}, 16, 8);
      ASSERT_NE(module, nullptr) << type;
      auto q = torch::randn({1, 2, 16, 8}), v = torch::randn({1, 2, 16, 3});
      EXPECT_EQ(module->forward(q, q, v).sizes(), v.sizes()) << type << " " << abstraction;
    }
}

TEST(AttentionFactory, RejectsUnknownNames) {
  EXPECT_TRUE(starts_with(validation_error({"sparse", 4, 4, "max"}, 16), "model.attention.type:"));
  EXPECT_TRUE(starts_with(validation_error({"combiner-fixed", 4, 4, "sum"}, 16),
                          "model.attention.abstraction:"));
  EXPECT_THROW(make_attention({"sparse", 4, 4, "max"}, 16, 8), std::invalid_argument);
}

TEST(AttentionFactory, RejectsBadLayouts) {
  for (const std::string type : {"fixed", "combiner-fixed"}) {
    EXPECT_TRUE(starts_with(validation_error({type, 0, 4, "max"}, 16), "model.attention.block:"));
    EXPECT_TRUE(starts_with(validation_error({type, -2, 4, "max"}, 16), "model.attention.block:"));
    // The row length does not matter to the fixed layouts.
    EXPECT_EQ(validation_error({type, 5, 7, "max"}, 16), "");
  }
  for (const std::string type : {"axial",
                                 "combiner-axial-vertical",
                                 "combiner-axial-horizontal",
                                 "combiner-axial-rowmajor",
                                 "combiner-mixture"}) {
    EXPECT_TRUE(starts_with(validation_error({type, 4, 5, "max"}, 16), "model.attention.row_len:"));
    EXPECT_TRUE(starts_with(validation_error({type, 4, 0, "max"}, 16), "model.attention.row_len:"));
    EXPECT_EQ(validation_error({type, 0, 8, "max"}, 16), "");  // block unused
    EXPECT_THROW(make_attention({type, 4, 5, "max"}, 16, 8), std::invalid_argument);
  }
  EXPECT_EQ(validation_error({"logsparse", 0, 0, "max"}, 13), "");
  EXPECT_EQ(validation_error({"full", 0, 0, "max"}, 13), "");
}

TEST(AttentionFactory, DeepSetsMapsAreParameters) {
  const int64_t D = 8;
  for (const auto& type : variant_names())
    for (const auto& abstraction : abstraction_names()) {
      auto module = make_attention({type, 4, 4, abstraction}, 16, D);
      auto params = module->named_parameters();
      const bool deepsets = is_combiner(type) && abstraction.rfind("deepsets-", 0) == 0;
      const bool with_query = deepsets && type != "combiner-axial-rowmajor";
      EXPECT_EQ(params.contains("phi_key"), deepsets) << type << " " << abstraction;
      EXPECT_EQ(params.contains("phi_query"), with_query) << type << " " << abstraction;
      if (deepsets) {
        EXPECT_EQ(params["phi_key"].sizes(), torch::IntArrayRef({D, D}));
      }
    }
}

TEST(AttentionFactory, DeepSetsMapsGetGradients) {
  auto module = make_attention({"combiner-mixture", 4, 4, "deepsets-mean"}, 16, 8);
  auto q = torch::randn({1, 1, 16, 8}), k = torch::randn({1, 1, 16, 8});
  auto v = torch::randn({1, 1, 16, 3});
  module->forward(q, k, v).square().sum().backward();
  for (const auto& p : module->parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_GT(p.grad().abs().max().item<double>(), 0.0);
  }
}

TEST(AttentionFactory, RejectsBadShapes) {
  auto module = make_attention({"combiner-fixed", 4, 4, "max"}, 16, 8);
  auto q = torch::randn({1, 2, 16, 8});
  EXPECT_THROW(module->forward(q, q, torch::randn({1, 2, 15, 3})), c10::Error);
  EXPECT_THROW(module->forward(q, torch::randn({1, 2, 16, 7}), q), c10::Error);
}

}  // namespace
}  // namespace combiner::attention
