// The distributed machinery on its own: launch variables, shards, devices, one-process no-ops,
// and a real two-rank Gloo group on loopback, its ranks as two threads of this process
// (averaged gradients over several buckets, broadcast, sharded evaluation, rank 0's work alone,
// the timeout).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <thread>

#include "free_port.h"
#include "model/transformer.h"
#include "test_utils.h"
#include "train/distributed.h"
#include "train/evaluate.h"

namespace combiner::train {
namespace {

using combiner::testing::free_port;
using combiner::testing::message_of;

TEST(LaunchEnvironment, NoVariablesMeanOneProcess) {
  const auto env = parse_launch_environment({});
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_FALSE(env.distributed());
}

TEST(LaunchEnvironment, ReadsTorchrunVariables) {
  const auto env = parse_launch_environment({{"RANK", "3"},
                                             {"WORLD_SIZE", "4"},
                                             {"LOCAL_RANK", "1"},
                                             {"LOCAL_WORLD_SIZE", "2"},
                                             {"MASTER_ADDR", "10.0.0.7"},
                                             {"MASTER_PORT", "29500"}});
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_FALSE(env.agent_store);
  const auto agent = parse_launch_environment({{"RANK", "0"},
                                               {"WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "h"},
                                               {"MASTER_PORT", "1"},
                                               {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                               {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_TRUE(agent.agent_store);
  EXPECT_EQ(agent.store_prefix, "/worker/attempt_2");
}

TEST(LaunchEnvironment, BadVariablesAreNamed) {
  const std::map<std::string, std::string> base = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& key, const std::string& value) {
    auto vars = base;
    if (value.empty())
      vars.erase(key);
    else
      vars[key] = value;
    return message_of([&] { parse_launch_environment(vars); });
  };
  EXPECT_NE(with("RANK", "5").find("RANK=5 is outside [0, WORLD_SIZE=2)"), std::string::npos);
  EXPECT_NE(with("RANK", "x").find("RANK=x"), std::string::npos);
  EXPECT_NE(with("RANK", "").find("RANK and WORLD_SIZE go together"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "-2").find("WORLD_SIZE=-2"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "").find("MASTER_PORT"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT=70000"), std::string::npos);
  EXPECT_NE(with("LOCAL_RANK", "2").find("LOCAL_RANK=2"), std::string::npos);
}

TEST(Shards, CoverEveryImageOnce) {
  for (int64_t count : {1, 2, 7, 10000})
    for (int64_t world : {1, 2, 3, 8}) {
      int64_t expected_begin = 0;
      for (int64_t rank = 0; rank < world; ++rank) {
        const auto [begin, end] = shard_range(count, rank, world);
        EXPECT_EQ(begin, expected_begin) << count << " " << world;
        EXPECT_LE(end - begin, (count + world - 1) / world);
        expected_begin = end;
      }
      EXPECT_EQ(expected_begin, count);
    }
}

TEST(NoGpuDevice, CpuAndAutoWithoutGpu) {
  EXPECT_TRUE(resolve_device("cpu", {}).is_cpu());
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_TRUE(resolve_device("auto", {}).is_cpu());
  for (const std::string name : {"cuda", "cuda:1"}) {
    const auto msg = message_of([&] { resolve_device(name, {}); });
    EXPECT_NE(msg.find("train.device: " + name), std::string::npos) << msg;
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
  }
}

TEST(Threads, ZeroSharesTheCoresAmongLocalProcesses) {
  LaunchEnvironment two;
  two.local_world_size = 2;
  EXPECT_EQ(threads_for(3, two), 3);
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  EXPECT_EQ(threads_for(0, {}), cores);
  EXPECT_EQ(threads_for(0, two), std::max<int64_t>(1, cores / 2));
}

torch::nn::Sequential small_net() {
  return torch::nn::Sequential(torch::nn::Linear(5, 7), torch::nn::Linear(7, 3));
}

TEST(Distributed, OneProcessIsANoOp) {
  Distributed dist;
  EXPECT_EQ(dist.rank(), 0);
  EXPECT_EQ(dist.world_size(), 1);
  EXPECT_TRUE(dist.is_main());
  EXPECT_EQ(dist.backend(), "none");
  auto t = torch::arange(4.0);
  dist.all_reduce_sum(t);
  EXPECT_TRUE(torch::equal(t, torch::arange(4.0)));
  auto net = small_net();
  net->forward(torch::ones({2, 5})).sum().backward();
  const auto grad = net->parameters()[0].grad().clone();
  dist.all_reduce_gradients(*net);
  EXPECT_TRUE(torch::equal(net->parameters()[0].grad(), grad));
  dist.barrier();
}

// The ranks below are two threads of this process, each with a Gloo group of its own. LibTorch
// 2.x records every collective in a process-wide flight recorder, which looks up and adds the
// group in a std::map before taking its lock (FlightRecorder::recordWithResetEnabled, torch
// 2.11), so two groups starting collectives at the same moment corrupt that map: a segfault in
// std::_Rb_tree_insert_and_rebalance, seen when rank 0's run_on_main released rank 1 straight
// into the all-reduce. combiner-train runs one process per rank, one group each, and never
// meets it. The recorder is off in this test binary (0 entries: LibTorch 1.13 has none).
const bool kFlightRecorderOff = setenv("TORCH_FR_BUFFER_SIZE", "0", 1) == 0;

// Runs body(dist) on two ranks of a fresh Gloo group, one thread each; returns their results.
template <typename Result>
std::vector<Result> on_two_ranks(const std::function<Result(const Distributed&)>& body,
                                 DistributedOptions options = {}) {
  EXPECT_TRUE(kFlightRecorderOff);
  const int64_t port = free_port();
  std::vector<std::future<Result>> ranks;
  for (int64_t rank = 0; rank < 2; ++rank)
    ranks.push_back(std::async(std::launch::async, [=] {
      LaunchEnvironment env;
      env.rank = env.local_rank = rank;
      env.world_size = env.local_world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      const Distributed dist(env, torch::kCPU, options);
      return body(dist);
    }));
  std::vector<Result> out;
  for (auto& r : ranks) out.push_back(r.get());
  return out;
}

TEST(Distributed, TwoRanksAverageGradientsInBuckets) {
  DistributedOptions options;
  options.bucket_bytes = 128;  // 32 floats: the 7x5 weight alone, the three others together
  std::vector<torch::nn::Sequential> nets;
  for (int64_t seed : {0, 1}) {  // different weights: the broadcast makes them rank 0's
    torch::manual_seed(seed);
    nets.push_back(small_net());
  }
  on_two_ranks<int>(
      [&](const Distributed& dist) {
        EXPECT_EQ(dist.backend(), "gloo");
        auto& net = nets[dist.rank()];
        dist.broadcast_parameters(*net);
        net->forward(torch::full({1, 5}, double(dist.rank() + 1))).sum().backward();
        dist.all_reduce_gradients(*net);
        return 0;
      },
      options);
  // Expected: rank 0's weights, and the mean gradient of the inputs 1 and 2 in one process.
  torch::manual_seed(0);
  auto net = small_net();
  net->forward(torch::cat({torch::full({1, 5}, 1.0), torch::full({1, 5}, 2.0)})).sum().backward();
  const auto expected = net->parameters();
  for (const auto& ranked : nets) {
    const auto params = ranked->parameters();
    ASSERT_EQ(params.size(), expected.size());
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::equal(params[i].detach(), expected[i].detach())) << i;
      EXPECT_TRUE(torch::allclose(params[i].grad(), expected[i].grad() / 2.0)) << i;
    }
  }
}

TEST(Distributed, TwoRanksSumAndEvaluateShards) {
  data::ImageSet images;
  images.shape = {2, 2, 3};
  images.count = 5;  // odd: shards of 2 and 3
  for (int64_t i = 0; i < images.count * images.shape.length(); ++i)
    images.pixels.push_back(static_cast<uint8_t>((i * 37) % 256));
  model::TransformerOptions o;
  o.layers = 1;
  o.width = 16;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = images.shape;
  o.attention.block = 6;
  o.attention.row_len = 6;
  std::vector<model::ImageTransformer> models;  // built here: the seed is process-wide
  for (int copy = 0; copy < 3; ++copy) {
    torch::manual_seed(0);
    models.emplace_back(o);
  }
  const auto whole = evaluate(models[2], images, 2, true);

  auto results = on_two_ranks<Evaluation>([&](const Distributed& dist) {
    auto sum = torch::tensor({double(dist.rank() + 1)});
    dist.all_reduce_sum(sum);
    EXPECT_EQ(sum.item<double>(), 3.0);
    return evaluate(models[dist.rank()], images, 2, true, dist);
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.images, 5);
    EXPECT_NEAR(r.bits_per_dim, whole.bits_per_dim, 1e-9);
    EXPECT_TRUE(torch::allclose(r.bits, whole.bits, 1e-5, 1e-6));
  }
}

TEST(Distributed, RankZeroWorkMayOutlastTheTimeout) {
  DistributedOptions options;
  options.timeout = std::chrono::seconds(2);
  auto sums = on_two_ranks<double>(
      [](const Distributed& dist) {
        bool ran = false;
        dist.run_on_main([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
          ran = true;
        });
        EXPECT_EQ(ran, dist.is_main());
        auto t = torch::ones({1});
        dist.all_reduce_sum(t);
        return t.item<double>();
      },
      options);
  EXPECT_EQ(sums, (std::vector<double>{2.0, 2.0}));
}

TEST(Distributed, ASilentRankTimesOut) {
  DistributedOptions options;
  options.timeout = std::chrono::seconds(2);  // joining may take a 1 s connect retry
  const auto start = std::chrono::steady_clock::now();
  auto messages = on_two_ranks<std::string>(
      [](const Distributed& dist) {
        if (dist.rank() == 1) {  // alive but never joins the all-reduce
          std::this_thread::sleep_for(std::chrono::seconds(3));
          return std::string();
        }
        auto t = torch::ones({1});
        return message_of([&] { dist.all_reduce_sum(t); });
      },
      options);
  EXPECT_NE(messages[0].find("rank 0 of 2: all-reduce failed"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("train.dist_timeout_s = 2 s"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("Timed out"), std::string::npos) << messages[0];  // Gloo's words
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace combiner::train
