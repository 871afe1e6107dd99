// The progress line of evaluation and sampling: counts, rate and ETA while running, the total
// time at the end.
#include <gtest/gtest.h>

#include "util/progress.h"

namespace combiner::util {
namespace {

TEST(Progress, LineSaysCountRateAndEta) {
  EXPECT_EQ(Progress::line("eval test", "images", 1200, 10000, 30.0),
            "eval test: 1200/10000 images | 40.0 images/s | ETA 220s");
  EXPECT_EQ(Progress::line("sample (4 images, 4 at a time)", "steps", 3072, 3072, 12.5),
            "sample (4 images, 4 at a time): 3072/3072 steps | 245.8 steps/s | done in 12.5s");
  // Nothing done yet: no rate to extrapolate from.
  EXPECT_EQ(Progress::line("eval val", "images", 0, 10, 1.0), "eval val: 0/10 images | 0.0 images/s");
}

}  // namespace
}  // namespace combiner::util
