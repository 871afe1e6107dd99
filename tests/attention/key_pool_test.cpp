// The keys' segment maxes made and taken back in a local pass's CTAs (fused/kernel_pass.h
// Forward::key_pool, Backward::key_pool), and fixed's queries, the blocks' maxes of q
// (Forward::query_pool, Backward::query_pool), on the CPU model, held to the pass and the segment
// max kernel; then the calls of rowmajor and fixed that take them, against the composed path.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "key_pool_cases.h"

namespace combiner::attention::key_pool_test {
namespace {

using key_pool_cases::Case;

const key_pool_cases::Kernels kCpu = {&fused::forward_cpu,
                                      &fused::backward_cpu,
                                      &fused::segment_max_forward_cpu,
                                      &fused::segment_max_backward_cpu};

TEST(KeyPool, TheLocalPassMakesTheKeyMaxesAsTheSegmentMaxKernel) {
  for (const Case& c : std::vector<Case>{{false, 288, 48, 64, torch::kBFloat16},
                                         {false, 200, 40, 128, torch::kBFloat16, true},
                                         {true, 240, 48, 32, torch::kFloat},
                                         {true, 330, 64, 64, torch::kDouble, true},
                                         {false, 390, 64, 16, torch::kFloat, true},
                                         // the maxes' gradient in slabs, one a column
                                         {false, 288, 48, 64, torch::kBFloat16, false, 48},
                                         {false, 390, 64, 16, torch::kDouble, true, 64},
                                         {false, 320, 40, 32, torch::kFloat, false, 40},
                                         // more than one key tile a segment: the backward in
                                         // the dk/dv walk's CTA of the arg-max's tile
                                         {false, 480, 96, 64, torch::kBFloat16},
                                         {false, 480, 96, 128, torch::kBFloat16, true},
                                         {true, 480, 96, 128, torch::kFloat, true},
                                         {false, 960, 96, 32, torch::kFloat, true, 96},
                                         {false, 600, 150, 32, torch::kFloat, true},
                                         {true, 960, 192, 32, torch::kBFloat16, true}})
    EXPECT_EQ(key_pool_cases::check(c, kCpu), "") << key_pool_cases::name(c);
}

TEST(KeyPool, FixedsLocalPassMakesAndTakesBackItsQueriesAsTheSegmentMaxKernel) {
  for (const Case& c : std::vector<Case>{{true, 240, 48, 32, torch::kFloat},
                                         {true, 330, 64, 64, torch::kDouble, true},
                                         {true, 200, 40, 128, torch::kBFloat16, true},
                                         {true, 198, 33, 16, torch::kBFloat16},
                                         // more than a query tile a block: the rest read from q
                                         {true, 480, 96, 64, torch::kBFloat16},
                                         {true, 600, 150, 32, torch::kDouble, true},
                                         {true, 960, 192, 32, torch::kFloat, true},
                                         // D 128: the walk and dq in one launch
                                         {true, 480, 96, 128, torch::kBFloat16, true}})
    for (const bool dy_acc : {false, true})
      EXPECT_EQ(key_pool_cases::check_query_pool(c, kCpu, dy_acc), "")
          << key_pool_cases::name(c) << (dy_acc ? ", its gradient in Acc" : "");
}

// A pass that packs segments makes none: the call keeps its pool launches there. One whose
// segments are more than a key tile makes them and takes their backward in its dk/dv walk.
TEST(KeyPool, AnUnpackedPassMakesThemAndTakesThemBack) {
  const auto q = torch::zeros({1, 2, 8, 64});
  struct Expected {
    int64_t W;
    bool made, taken_back;
  };
  for (const auto& e : std::vector<Expected>{{48, true, true},
                                             {64, true, true},
                                             {96, true, true},
                                             {192, true, true},
                                             {24, false, false}}) {
    const Case c{false, 8 * e.W, e.W, 64, torch::kFloat};
    const FusedPool pool = FusedPool::segment_max(false, 7, e.W);
    const auto local = key_pool_cases::local_pass(c);
    EXPECT_EQ(key_pool_fits_on_chip(local, q, pool), e.made) << "W " << e.W;
    EXPECT_EQ(key_pool_backward_fits_on_chip(local, q, pool), e.taken_back) << "W " << e.W;
  }
}

// One float64 forward + backward of `variant` at blocks or rows of W on the fused path (the CPU
// model) and on the composed one, with the fused call's launches.
struct Call {
  std::vector<fused_launch::LaunchTime> times;
  std::vector<torch::Tensor> grads, expected;
  // The largest difference between the two paths' gradients of q (0), k (1) or v (2).
  double error(int i) const { return (grads[i] - expected[i]).abs().max().item<double>(); }
};
Call fused_and_composed(const std::string& variant, int64_t W, int64_t L, int64_t D, int seed) {
  auto fused = make_attention({variant, W, W, "max"}, L, D),
       composed = make_attention({variant, W, W, "max"}, L, D);
  fused->set_path(AttentionImpl::Path::kFused);
  composed->set_path(AttentionImpl::Path::kComposed);
  torch::manual_seed(seed);
  const std::vector<int64_t> shape = {1, 2, L, D};
  const auto draw = [&] { return torch::randn(shape, torch::kDouble).requires_grad_(); };
  const auto q = draw(), k = draw(), v = draw();
  const auto g = torch::randn(shape, torch::kDouble);
  Call c;
  {
    fused_launch::LaunchTimes timer;
    c.grads = torch::autograd::grad({fused->forward(q, k, v)}, {q, k, v}, {g});
    c.times = timer.times();
  }
  c.expected = torch::autograd::grad({composed->forward(q, k, v)}, {q, k, v}, {g});
  return c;
}

// At the benchmark's layout (L 3,072, rows and blocks of 48) in float64: rowmajor and fixed run
// no pool launch either way (fixed's local pass makes its queries, the query maxes, in the
// forward, and takes them back in its query CTAs). At CIFAR-10's (96: two key tiles a segment)
// the same: the local pass makes the key maxes in the forward and takes them back in its dk/dv
// walk (fixed's makes its queries from two tiles' rows of q, and its dq CTAs take them back).
// Each call's gradients are the composed path's.
TEST(KeyPool, TheCallsMakeTheirKeyMaxesInTheLocalPass) {
  struct Expected {
    std::string variant;
    int64_t W;
    int pool_launches, made, taken, queries, queries_taken;
  };
  for (const auto& [variant,
                    W,
                    pool_launches,
                    made_expected,
                    taken_expected,
                    queries_expected,
                    queries_taken_expected] :
       std::vector<Expected>{{"combiner-axial-rowmajor", 48, 0, 2, 1, 0, 0},
                             {"combiner-fixed", 48, 0, 2, 1, 1, 1},
                             {"combiner-axial-rowmajor", 96, 0, 2, 1, 0, 0},
                             {"combiner-fixed", 96, 0, 2, 1, 1, 1}}) {
    const Call call = fused_and_composed(variant, W, 3072, 16, 9);
    int pools = 0, made = 0, taken = 0, queries = 0, queries_taken = 0;
    for (const auto& t : call.times) {
      pools += t.what.rfind("segment max", 0) == 0;
      made += t.what.find("its keys' segment max") != std::string::npos;
      taken += t.what.find("its keys' segment max backward") != std::string::npos;
      queries += t.what.find("its queries the segment max of q's rows") != std::string::npos;
      queries_taken += t.what.find("its queries' segment max backward") != std::string::npos;
    }
    const std::string name = variant + " at " + std::to_string(W);
    EXPECT_EQ(pools, pool_launches) << name;
    EXPECT_EQ(queries, queries_expected) << name;
    EXPECT_EQ(made, made_expected) << name;  // the forward's, and the backward's (taken back)
    EXPECT_EQ(taken, taken_expected) << name;
    EXPECT_EQ(queries_taken, queries_taken_expected) << name;
    for (int i = 0; i < 3; ++i) EXPECT_LT(call.error(i), 1e-10) << name << " " << i;
  }
}

// At D 128 fixed's local pass at blocks of 96 runs its dk/dv walk and dq in one launch
// (fused::interleaved_backward): its queries' gradient is stored in a buffer of its own, a row a
// block, not over u's gradient, which the walk's CTAs of the same launch read; the dq CTAs take
// the query maxes back. Its float64 gradients are the composed path's.
TEST(KeyPool, FixedsLocalPassAtD128TakesItsQueriesBackBesideItsWalk) {
  const Call call = fused_and_composed("combiner-fixed", 96, 960, 128, 11);
  int local = 0, pools = 0;
  for (const auto& t : call.times) {
    pools += t.what.rfind("segment max", 0) == 0;
    local += t.what.rfind("backward (dk dv and dq in one launch): queries 9 x 1", 0) == 0 &&
             t.what.find("its queries' segment max backward") != std::string::npos;
  }
  EXPECT_EQ(local, 1);
  EXPECT_EQ(pools, 0);
  for (int i = 0; i < 3; ++i) EXPECT_LT(call.error(i), 1e-10) << i;
}

}  // namespace
}  // namespace combiner::attention::key_pool_test
