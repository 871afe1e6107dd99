// The buffers the fused glue allocates without zeros (fused_glue::unset: o and lse, u and its
// lse, the pooled slots, the backward's gradient buffers, slabs and deltas made by the passes)
// hold rows no kernel reads before a pass writes them, or rows no kernel reads at all
// (horizontal's local passes make each row's first and last W - 1 summaries, not the whole row's,
// which no pass reads). Held by filling every such buffer with NaN (poison_unset) and asking for
// the same o and gradients, bit for bit, as with the allocator's bytes: a kernel that read a row
// nobody wrote would carry the NaN into them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/checks.h"
#include "attention/fused/launch.h"

// A namespace of this file's own: its constants would meet another file's in a unity batch.
namespace combiner::attention::unset_test {
namespace {

struct Case {
  std::string variant, abstraction;
  int64_t L, segment, D;
  torch::ScalarType dtype;
};

std::string name(const Case& c) {
  return c.variant + " " + c.abstraction + " L " + std::to_string(c.L) + " segment " +
         std::to_string(c.segment) + " D " + std::to_string(c.D) + " " + c10::toString(c.dtype);
}

struct Run {
  torch::Tensor o, dq, dk, dv;
};

Run run(const Case& c, bool poisoned) {
  const fused_glue::PoisonUnsetScope poison(poisoned);
  torch::manual_seed(5);
  auto m = make_attention({c.variant, c.segment, c.segment, c.abstraction}, c.L, c.D);
  m->set_path(AttentionImpl::Path::kFused);
  const auto draw = [&] { return torch::randn({1, 2, c.L, c.D}).to(c.dtype).requires_grad_(); };
  const auto q = draw(), k = draw(), v = draw();
  const auto g = torch::randn({1, 2, c.L, c.D}).to(c.dtype);
  Run r;
  r.o = m->forward(q, k, v);
  const auto grads = torch::autograd::grad({r.o}, {q, k, v}, {g});
  r.dq = grads[0];
  r.dk = grads[1];
  r.dv = grads[2];
  return r;
}

TEST(UnsetBuffers, NaNInRowsNoPassWritesChangesNothing) {
  const auto bf16 = torch::kBFloat16, f32 = torch::kFloat;
  const std::vector<Case> cases = {
      // Blocks and rows of 16: pools on chip, horizontal's local passes over 15 columns a row.
      {"combiner-fixed", "max", 256, 16, 32, bf16},
      {"combiner-axial-rowmajor", "max", 256, 16, 32, bf16},
      {"combiner-axial-vertical", "max", 256, 16, 32, bf16},
      {"combiner-axial-horizontal", "max", 256, 16, 32, bf16},
      {"combiner-mixture", "max", 256, 16, 32, bf16},
      // Rows of 48, the benchmark's; float32 at D 64.
      {"combiner-axial-horizontal", "max", 384, 48, 64, f32},
      // Blocks and rows of 96: two key tiles a segment (fixed's walks make the deltas), the scan
      // kernels' pools (horizontal's local passes over whole rows).
      {"combiner-fixed", "max", 480, 96, 32, bf16},
      {"combiner-axial-horizontal", "max", 480, 96, 32, bf16},
      {"combiner-axial-rowmajor", "max", 480, 96, 32, bf16},
      // D 128: the backward pair interleaved, vertical at rows of 96 remaking its local pass.
      {"combiner-axial-vertical", "max", 576, 96, 128, bf16},
      {"combiner-fixed", "max", 192, 48, 128, bf16},
      // Means: LibTorch's running sums make the slots, which the glue is given.
      {"combiner-axial-horizontal", "mean", 256, 16, 32, f32},
      {"combiner-axial-vertical", "mean", 256, 16, 32, f32},
  };
  for (const auto& c : cases) {
    const auto plain = run(c, false), poisoned = run(c, true);
    EXPECT_TRUE(torch::equal(plain.o, poisoned.o)) << name(c);
    EXPECT_TRUE(torch::equal(plain.dq, poisoned.dq)) << name(c);
    EXPECT_TRUE(torch::equal(plain.dk, poisoned.dk)) << name(c);
    EXPECT_TRUE(torch::equal(plain.dv, poisoned.dv)) << name(c);
    EXPECT_FALSE(plain.o.isnan().any().item<bool>()) << name(c);
    EXPECT_FALSE(plain.dk.isnan().any().item<bool>()) << name(c);
  }
}

// A pass whose every segment reads the same key and value rows (here 4 segments of 8 queries,
// unmasked, over rows 0..7): its dk goes through slabs, one a segment, summed into a buffer
// they fill; its dv is added into a zeroed buffer, for a value slot has no slabs. Against the
// dense attention, with the unset buffers NaN.
TEST(UnsetBuffers, ValuesReadByEverySegmentAddIntoZeros) {
  const fused_glue::PoisonUnsetScope poison;
  const int64_t L = 32, D = 8;
  FusedCall shared;
  shared.passes.resize(1);
  shared.passes[0].query = {4, 8, 8, 1, L};
  shared.passes[0].key = shared.passes[0].value = {4, 8, 0, 1, L};
  shared.passes[0].mask = fused::Mask::kNone;
  shared.scale = 0.25;
  torch::manual_seed(9);
  std::vector<torch::Tensor> in;
  for (int i = 0; i < 3; ++i)
    in.push_back(torch::randn({1, 2, L, D}, torch::kDouble).requires_grad_());
  const auto d_o = torch::randn({1, 2, L, D}, torch::kDouble);
  const auto o = fused_call(in[0], in[1], in[2], shared);
  const auto fused = torch::autograd::grad({o}, {in[0], in[1], in[2]}, {d_o});
  const auto scores = torch::matmul(in[0], in[1].narrow(2, 0, 8).transpose(2, 3)) * 0.25;
  const auto dense = torch::matmul(torch::softmax(scores, -1), in[2].narrow(2, 0, 8));
  const auto want = torch::autograd::grad({dense}, {in[0], in[1], in[2]}, {d_o});
  EXPECT_LT((o - dense).abs().max().item<double>(), 1e-12);
  for (int i = 0; i < 3; ++i)
    EXPECT_LT((fused[i] - want[i]).abs().max().item<double>(), 1e-12) << "input " << i;
}

// unset() fills with NaN while poisoned, in every floating dtype the glue allocates.
TEST(UnsetBuffers, AreNaNWhilePoisoned) {
  for (const auto dtype : {torch::kBFloat16, torch::kFloat, torch::kDouble}) {
    const fused_glue::PoisonUnsetScope poison;
    const auto t = fused_glue::unset({2, 3}, torch::TensorOptions().dtype(dtype));
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_TRUE(t.isnan().all().item<bool>()) << dtype;
  }
  EXPECT_FALSE(fused_glue::poison_unset(false));  // each scope put back what it found
}

}  // namespace
}  // namespace combiner::attention::unset_test
