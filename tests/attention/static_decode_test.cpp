// The host side of decoding in fixed shapes (attention/static_decode.h): its lists are the
// plan's, each span is summarised once, slots are reused. Its outputs against forward() are
// checked with the per-variant decoders' (decode_test.cpp).
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "attention/plan.h"
#include "attention/static_decode.h"

#include <set>

namespace combiner::attention {
namespace {

// The host side at a CIFAR-10-like layout: widths are the plan's largest sets, every span is
// summarised exactly once (at the first step that reads it), and slots are reused.
TEST(DecodeScheduleTest, SummarisesEachSpanOnceInFewSlots) {
  const int64_t L = 96 * 8, W = 96;
  for (const std::string name :
       {"combiner-axial-vertical", "combiner-axial-rowmajor", "combiner-fixed"}) {
    SCOPED_TRACE(name);
    DecodeSchedule schedule(name, L, /*block=*/32, W);
    std::vector<int64_t> direct(schedule.direct_width()), slots(schedule.span_width());
    std::vector<float> bias(schedule.direct_width() + schedule.span_width());
    int64_t widest_direct = 0, widest_spans = 0, summaries = 0;
    std::set<std::vector<int64_t>> distinct;
    for (int64_t i = 0; i < L; ++i) {
      const auto plan = plan_position(name, i, L, 32, W);
      widest_direct = std::max(widest_direct, int64_t(plan.direct.size()));
      widest_spans = std::max(widest_spans, int64_t(plan.spans.size()));
      for (const auto& span : plan.spans) {
        auto key = span.positions;
        key.push_back(span.query_position);
        distinct.insert(key);
      }
      for (const auto& job :
           schedule.advance(i, direct.data(), slots.data(), bias.data(), torch::kCPU))
        summaries += job.slots.size(0);
      for (size_t t = 0; t < plan.direct.size(); ++t) EXPECT_EQ(direct[t], plan.direct[t]);
      for (size_t t = plan.direct.size(); t < direct.size(); ++t) EXPECT_TRUE(std::isinf(bias[t]));
      for (int64_t s : slots) EXPECT_TRUE(s >= 0 && s < schedule.span_slots());
    }
    EXPECT_EQ(schedule.direct_width(), widest_direct);
    EXPECT_EQ(schedule.span_width(), widest_spans);
    EXPECT_EQ(summaries, int64_t(distinct.size()));
    EXPECT_LE(schedule.span_slots(), int64_t(distinct.size()));
    if (name == "combiner-axial-vertical") {  // a row's W column spans die with the row
      EXPECT_EQ(schedule.span_slots(), W);
    }
    if (name == "combiner-fixed") {  // every block is read to the end
      EXPECT_EQ(schedule.span_slots(), int64_t(distinct.size()));
    }
  }
}

TEST(DecodeScheduleTest, RefusesStepsOutOfOrder) {
  DecodeSchedule schedule("combiner-fixed", 16, 4, 4);
  std::vector<int64_t> direct(schedule.direct_width()), slots(schedule.span_width());
  std::vector<float> bias(schedule.direct_width() + schedule.span_width());
  EXPECT_THROW(schedule.advance(1, direct.data(), slots.data(), bias.data(), torch::kCPU),
               c10::Error);
}

// The fused step where its kernel cannot go: forced, a one-line error naming why; on kAuto the
// LibTorch ops take the step (here bfloat16 inputs, which the kernel's model does not read).
TEST(StaticDecodeLayerTest, ForcedFusedStepRefusesWhatItCannotTake) {
  AttentionOptions options{"combiner-axial-vertical", 4, 4, "max"};
  auto module = make_attention(options, 16, 8);
  const auto q = torch::randn({1, 2, 8}, torch::kBFloat16);
  for (const auto path : {StaticDecodeLayer::Path::kFused, StaticDecodeLayer::Path::kAuto}) {
    StaticDecodeInputs inputs(options, 16, torch::kCPU);
    StaticDecodeLayer layer(module->span_summary(), {path});
    layer.summarize(inputs.prepare(0));
    if (path == StaticDecodeLayer::Path::kAuto) {
      EXPECT_EQ(layer.step(q, q, q, inputs).scalar_type(), torch::kBFloat16);
      continue;
    }
    try {
      layer.step(q, q, q, inputs);
      ADD_FAILURE() << "a bfloat16 step was taken by the fused path";
    } catch (const c10::Error& e) {
      const std::string what = e.what_without_backtrace();
      EXPECT_NE(what.find("fused step cannot take this: q, k and v must share a float32 or "
                          "float64 dtype, got BFloat16"),
                std::string::npos)
          << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace combiner::attention
