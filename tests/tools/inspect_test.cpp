// The inspector's library side: pattern pictures agree cell by cell with the plans, the fast run
// on [H, L, D] inputs agrees with the dense reference, and bad inputs name the flag or file.
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>

#include "tools/inspect.h"
#include "attention/plan.h"
#include "test_utils.h"
#include "util/npy.h"

namespace combiner::attention {
namespace {

Rgb pixel(const torch::TensorAccessor<uint8_t, 3>& image, int64_t i, int64_t j) {
  return {image[i][j][0], image[i][j][1], image[i][j][2]};
}

AttentionOptions layout(const std::string& type, int64_t length, int64_t s, int64_t w) {
  return inspect_options(type, s, w, "max", length);
}

TEST(InspectPattern, EveryCellHasThePlansColour) {
  for (const auto& [L, s, W] : std::vector<std::array<int64_t, 3>>{{24, 4, 4}, {20, 3, 5}}) {
    for (const auto& type : variant_names()) {
      const auto options = layout(type, L, s, W);
      const auto images = pattern_images(options, L);
      const auto plans = make_plans(options, L);
      ASSERT_EQ(images.sizes(), (std::vector<int64_t>{int64_t(plans.size()), L, L, 3})) << type;
      for (size_t p = 0; p < plans.size(); ++p) {
        const auto colours = span_colour_indices(plans[p]);
        const torch::Tensor panel = images[p];
        const auto image = panel.accessor<uint8_t, 3>();
        for (int64_t i = 0; i < L; ++i) {
          std::vector<Rgb> expected(L, kUnseenColour);
          for (int64_t j : plans[p][i].direct) expected[j] = kDirectColour;
          for (size_t r = 0; r < plans[p][i].spans.size(); ++r)
            for (int64_t j : plans[p][i].spans[r].positions)
              expected[j] = span_colour(colours[i][r]);
          expected[i] = kSelfColour;
          for (int64_t j = i + 1; j < L; ++j) expected[j] = kFutureColour;
          for (int64_t j = 0; j < L; ++j) {
            ASSERT_EQ(pixel(image, i, j), expected[j])
                << type << " plan " << p << " i=" << i << " j=" << j;
          }
          // Every Combiner row is covered: no unseen cell in the past.
          if (!is_combiner(type)) continue;
          for (int64_t j = 0; j <= i; ++j) {
            EXPECT_NE(pixel(image, i, j), kUnseenColour);
          }
        }
      }
    }
  }
}

TEST(InspectPattern, SpansOfOneRowGetDistinctColours) {
  for (const auto& type : variant_names()) {
    const auto options = layout(type, 64, 8, 8);
    for (const auto& plan : make_plans(options, 64)) {
      const auto colours = span_colour_indices(plan);
      for (size_t i = 0; i < plan.size(); ++i) {
        ASSERT_EQ(colours[i].size(), plan[i].spans.size());
        std::set<int64_t> distinct(colours[i].begin(), colours[i].end());
        if (plan[i].spans.size() <= size_t(kPaletteSize)) {
          EXPECT_EQ(distinct.size(), plan[i].spans.size()) << type << " i=" << i;
        }
        for (int64_t c : colours[i]) EXPECT_TRUE(c >= 0 && c < kPaletteSize);
      }
    }
  }
}

TEST(InspectPattern, VerticalColumnsKeepTheirColourDownThePicture) {
  const auto plans = make_plans(layout("combiner-axial-vertical", 36, 0, 6), 36);
  const auto colours = span_colour_indices(plans[0]);
  std::map<int64_t, int64_t> column_colour;
  for (size_t i = 0; i < plans[0].size(); ++i)
    for (size_t r = 0; r < plans[0][i].spans.size(); ++r) {
      const int64_t column = plans[0][i].spans[r].positions.front();
      auto [it, fresh] = column_colour.emplace(column, colours[i][r]);
      EXPECT_EQ(it->second, colours[i][r]) << "column " << column << " at i=" << i;
    }
  EXPECT_EQ(column_colour.size(), 6u);
}

TEST(InspectPattern, MixtureDrawsBothPlans) {
  const auto images = pattern_images(layout("combiner-mixture", 16, 0, 4), 16);
  EXPECT_EQ(images.size(0), 2);
  EXPECT_FALSE(torch::equal(images[0], images[1]));
}

HeadInputs random_heads(int64_t H, int64_t L, int64_t D, int64_t Dv, uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({H, L, D}), torch::randn({H, L, D}), torch::randn({H, L, Dv})};
}

TEST(InspectRunTest, FastOutputMatchesReference) {
  const auto in = random_heads(3, 24, 6, 5, 7);
  for (const auto& type : variant_names())
    for (const auto& abstraction : abstraction_names()) {
      const auto options = inspect_options(type, 5, 6, abstraction, 24);
      const auto run = run_fast(options, in);
      ASSERT_EQ(run.out.sizes(), (std::vector<int64_t>{3, 24, 5}));
      ASSERT_EQ(run.out.scalar_type(), torch::kFloat);
      const auto reference = run_reference(options, run, in);
      const double error = (run.out.to(torch::kDouble) - reference).abs().max().item<double>();
      EXPECT_LT(error, 1e-5) << type << "/" << abstraction;
    }
}

TEST(InspectRunTest, MatrixImageFadesByWeightInsideThePattern) {
  const auto in = random_heads(2, 16, 4, 4, 3);
  for (const std::string type : {"fixed", "combiner-fixed", "combiner-mixture"}) {
    const auto options = inspect_options(type, 4, 4, "max", 16);
    const auto pattern = pattern_images(options, 16);
    const auto matrix = matrix_images(options, run_fast(options, in), in);
    ASSERT_EQ(matrix.sizes(), pattern.sizes());
    const auto m = matrix.accessor<uint8_t, 4>();
    const auto p = pattern.accessor<uint8_t, 4>();
    for (int64_t k = 0; k < matrix.size(0); ++k)
      for (int64_t i = 0; i < 16; ++i)
        for (int64_t j = 0; j < 16; ++j) {
          const Rgb drawn = pixel(m[k], i, j), base = pixel(p[k], i, j);
          if (base == kFutureColour || base == kUnseenColour) {
            EXPECT_EQ(drawn, base);
          } else {
            EXPECT_NE(drawn, kFutureColour) << type << " i=" << i << " j=" << j;
            for (int ch = 0; ch < 3; ++ch) EXPECT_GE(drawn[ch], base[ch]);  // faded towards white
          }
        }
  }
  const auto big = random_heads(1, kMaxMatrixLength + 4, 2, 2, 0);
  const auto options = inspect_options("full", 0, 0, "max", kMaxMatrixLength + 4);
  EXPECT_THROW(matrix_images(options, run_fast(options, big), big), std::invalid_argument);
}

// Runs `body` and returns the message of the exception it throws ("" if none).
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(InspectOptionsTest, MissingOrBadLayoutFlagsAreNamed) {
  EXPECT_NE(error_of([] { inspect_options("axial", 0, 0, "max", 16); }).find("--row-len"),
            std::string::npos);
  EXPECT_NE(error_of([] { inspect_options("axial", 0, 5, "max", 16); }).find("--row-len"),
            std::string::npos);
  EXPECT_NE(error_of([] { inspect_options("combiner-fixed", 0, 4, "max", 16); }).find("--block"),
            std::string::npos);
  EXPECT_NE(error_of([] { inspect_options("nope", 4, 4, "max", 16); }).find("nope"),
            std::string::npos);
  // Flags the variant does not use are ignored.
  EXPECT_EQ(error_of([] { inspect_options("logsparse", 0, 7, "max", 16); }), "");
  EXPECT_EQ(inspect_options("fixed", 4, 0, "max", 16).block, 4);
}

TEST(InspectInputsTest, BadFilesNameTheFlagAndFile) {
  combiner::testing::TempDir dir;
  const auto save = [&](const std::string& name, const torch::Tensor& t) {
    util::save_npy(dir.file(name), t);
    return dir.file(name);
  };
  const auto q = save("q.npy", torch::randn({2, 8, 4}));
  const auto k = save("k.npy", torch::randn({2, 8, 4}));
  const auto v = save("v.npy", torch::randn({2, 8, 3}));
  const auto ints = save("ints.npy", torch::zeros({2, 8, 4}, torch::kLong));
  const auto flat = save("flat.npy", torch::randn({8, 4}));
  const auto short_k = save("short_k.npy", torch::randn({2, 7, 4}));
  const auto short_v = save("short_v.npy", torch::randn({2, 7, 3}));
  EXPECT_EQ(load_head_inputs(q, k, v).v.size(2), 3);
  const std::vector<std::array<std::string, 5>> cases = {
      {dir.file("missing.npy"), k, v, "--q", "missing.npy"},
      {ints, k, v, "--q", "float32"},
      {q, flat, v, "--k", "float32"},
      {q, short_k, v, "--k", "short_k.npy"},
      {q, k, short_v, "--v", "short_v.npy"},
  };
  for (const auto& c : cases) {
    const auto message = error_of([&] { load_head_inputs(c[0], c[1], c[2]); });
    EXPECT_NE(message.find(c[3]), std::string::npos) << message;
    EXPECT_NE(message.find(c[4]), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace combiner::attention
