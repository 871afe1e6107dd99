// util::CapturedWork: without a CUDA device (or in a CPU-only build) it says so and refuses; on a
// GPU (the GpuCapturedWork suite, its own ctest entry) a replay redoes the captured launches on
// the same memory, and tensors made during the capture are rewritten by each replay.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "util/cuda_graph.h"

namespace combiner::util {
namespace {

TEST(CapturedWork, RefusesWithoutACudaDevice) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(CapturedWork::available());
  int runs = 0;
  try {
    CapturedWork captured([&] { ++runs; });
    FAIL() << "captured without a CUDA device";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA") != std::string::npos) << what;
  }
  EXPECT_EQ(runs, 0) << "nothing runs when nothing can be captured";
}

TEST(GpuCapturedWork, ReplaysTheLaunchesOnTheSameMemory) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(CapturedWork::available());
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto counter = torch::zeros({4}, cuda);
  const auto a = torch::randn({64, 64}, cuda), b = torch::randn({64, 64}, cuda);
  torch::Tensor product;  // made during the capture: in the graph's pool
  int host_runs = 0;
  CapturedWork captured(
      [&] {
        ++host_runs;
        counter.add_(1);
        product = torch::matmul(a, b) + counter.sum();
      },
      /*warmup=*/2);
  EXPECT_EQ(host_runs, 3) << "two warm-up runs and the captured one";
  // A capture records the launches without running them: the warm-up runs alone have counted.
  EXPECT_EQ(counter[0].item<float>(), 2.0f);
  EXPECT_EQ(captured.last_replay_ms(), -1.0) << "no replay timed yet";
  for (int i = 0; i < 5; ++i) captured.replay();
  EXPECT_GT(captured.last_replay_ms(), 0.0) << "the last replay's GPU time";
  torch::cuda::synchronize();
  EXPECT_EQ(host_runs, 3) << "a replay runs no host code";
  EXPECT_EQ(counter[0].item<float>(), 7.0f);
  const auto expected = torch::matmul(a, b) + 28.0f;  // counter.sum() in the last replay
  EXPECT_TRUE(torch::allclose(product, expected, 1e-4, 1e-4));
}

}  // namespace
}  // namespace combiner::util
