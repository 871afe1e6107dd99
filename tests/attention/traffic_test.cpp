// The fused launches' global-memory traffic (attention/fused/traffic.h), counted by hand on the
// smallest plans: one segment of 64 causal queries (one tile each way) and of 128 (two query
// tiles, the second reading the first's keys again), forward and both backward shapes, the
// gradient kinds, the scans; then every launch of a real call through LaunchTimes.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attention/attention.h"
#include "attention/fused/launch.h"
#include "attention/fused/traffic.h"

namespace combiner::attention {
namespace {

constexpr int64_t D = 32, kRow = D * 2;  // bytes of a bfloat16 row
constexpr double kLse = 4;               // a float32 per query

// Distinct addresses for the operands (never read).
struct Buffers {
  std::vector<char> q, k, v, o, lse, d_o, delta, dq, dk, dv;
  explicit Buffers(int64_t rows)
      : q(rows * kRow),
        k(rows * kRow),
        v(rows * kRow),
        o(rows * kRow),
        lse(rows * 8),
        d_o(rows * kRow),
        delta(rows * 8),
        dq(rows * kRow * 2),
        dk(rows * kRow * 2),
        dv(rows * kRow * 2) {}
};

fused::Operand operand(const std::vector<char>& x) {
  return {x.data(), 0, 0, D};
}

// One causal segment of `rows` queries over its own keys, bfloat16, B x H.
fused::Pass one_segment(const Buffers& b, int64_t rows, int64_t batch = 1, int64_t heads = 1) {
  fused::Pass p;
  p.batch = batch;
  p.heads = heads;
  p.dim = D;
  p.dtype = fused::Dtype::kBFloat16;
  p.query = {1, rows, rows, 1, rows, 0};
  p.key = p.value = p.query;
  p.mask = fused::Mask::kCausal;
  p.q = operand(b.q);
  p.k = operand(b.k);
  p.v = operand(b.v);
  return p;
}

fused::Forward forward_of(const Buffers& b, const fused::Pass& p) {
  fused::Forward f;
  f.pass = p;
  f.o = const_cast<char*>(b.o.data());
  f.o_stride[2] = D;
  f.lse = const_cast<char*>(b.lse.data());
  return f;
}

fused::GradOut store(const std::vector<char>& x) {
  fused::GradOut g;
  g.data = const_cast<char*>(x.data());
  g.kind = fused::GradOut::kStore;
  g.stride[2] = D;
  return g;
}

fused::Backward backward_of(const Buffers& b, const fused::Pass& p) {
  fused::Backward bw;
  bw.pass = p;
  bw.d_o = operand(b.d_o);
  bw.lse = b.lse.data();
  bw.delta = b.delta.data();
  bw.dq = store(b.dq);
  bw.dk = store(b.dk);
  bw.dv = store(b.dv);
  return bw;
}

TEST(FusedTraffic, OneTileForwardReadsAndWritesEachRowOnce) {
  const Buffers b(64);
  const auto t = fused::traffic(forward_of(b, one_segment(b, 64)));
  // q, k, v read and o written, 64 rows each; lse written.
  EXPECT_DOUBLE_EQ(t.unique, 4 * 64 * kRow + 64 * kLse);
  EXPECT_DOUBLE_EQ(t.requested(), t.unique);
  EXPECT_DOUBLE_EQ(t.loaded, 3 * 64 * kRow);  // q, k and v into the tiles
}

TEST(FusedTraffic, ASecondQueryTileReadsTheKeysAgain) {
  const Buffers b(128);
  const auto t = fused::traffic(forward_of(b, one_segment(b, 128)));
  EXPECT_DOUBLE_EQ(t.unique, 4 * 128 * kRow + 128 * kLse);
  // Query tile 0 reads key tile 0; tile 1 reads key tiles 0 and 1: k and v 192 rows each.
  EXPECT_DOUBLE_EQ(t.requested(), (128 + 2 * 192 + 128) * kRow + 128 * kLse);
}

TEST(FusedTraffic, EveryHeadRepeatsTheWalk) {
  const Buffers b(128);
  const auto one = fused::traffic(forward_of(b, one_segment(b, 128)));
  const auto six = fused::traffic(forward_of(b, one_segment(b, 128, 2, 3)));
  EXPECT_DOUBLE_EQ(six.unique, 6 * one.unique);
  EXPECT_DOUBLE_EQ(six.requested(), 6 * one.requested());
}

TEST(FusedTraffic, AMergedForwardReadsWhatItRewrites) {
  const Buffers b(64);
  auto f = forward_of(b, one_segment(b, 64));
  f.merge = true;
  const auto t = fused::traffic(f);
  EXPECT_DOUBLE_EQ(t.unique, 4 * 64 * kRow + 64 * kLse + 64 * kRow + 64 * kLse);
}

TEST(FusedTraffic, OneCtaBackwardLoadsItsTilesOnce) {
  const Buffers b(64);
  auto bw = backward_of(b, one_segment(b, 64));
  ASSERT_EQ(fused::backward_launches(bw), 1);
  // k, v, q and dO read, lse and delta read; dk, dv and dq written.
  const double plain = 4 * 64 * kRow + 2 * 64 * kLse + 3 * 64 * kRow;
  auto t = fused::traffic(bw);
  EXPECT_DOUBLE_EQ(t.unique, plain);
  EXPECT_DOUBLE_EQ(t.requested(), plain);
  // dq added in place: its rows read first.
  bw.dq.addend = bw.dq.data;
  bw.dq.addend_in_storage = true;
  EXPECT_DOUBLE_EQ(fused::traffic(bw).unique, plain + 64 * kRow);
  // dk into a float32 buffer, atomically: 4-byte elements read and written.
  bw.dk.kind = fused::GradOut::kAtomic;
  EXPECT_DOUBLE_EQ(fused::traffic(bw).unique, plain + 64 * kRow - 64 * kRow + 2 * 64 * D * 4);
}

TEST(FusedTraffic, TwoKernelBackwardWalksBothWays) {
  const Buffers b(128);
  const auto bw = backward_of(b, one_segment(b, 128));
  ASSERT_EQ(fused::backward_launches(bw), 2);
  const auto t = fused::traffic(bw);
  EXPECT_DOUBLE_EQ(t.unique, 4 * 128 * kRow + 2 * 128 * kLse + 3 * 128 * kRow);
  // dk/dv: key tile 0 walks queries 0..127, key tile 1 queries 64..127: q, dO, lse, delta of
  // 192 rows. dq: query tile 0 reads key tile 0, tile 1 key tiles 0 and 1: k, v of 192 rows.
  // Each kernel reads its own tiles (k, v 128 + 192; q, dO 192 + 128 rows).
  const double reads = 4 * 320 * kRow + 2 * 320 * kLse;
  EXPECT_DOUBLE_EQ(t.requested(), reads + 3 * 128 * kRow);
  // Into the tiles: all but the dq kernel's lse and delta, which its threads load themselves.
  EXPECT_DOUBLE_EQ(t.loaded, 4 * 320 * kRow + 2 * 192 * kLse);
}

// The backward of a max over one segment of 128 rows of x (bfloat16), added into dx.
fused::SegmentMax one_segment_max(const void* x, const void* dy, const void* dx) {
  fused::SegmentMax m;
  m.batch = m.heads = m.segments = 1;
  m.rows = m.len = 128;
  m.dim = D;
  m.dtype = fused::Dtype::kBFloat16;
  m.stride[2] = m.dx_stride[2] = D;
  m.x = x;
  m.dy = dy;
  m.dx = const_cast<void*>(dx);
  m.accumulate = true;
  return m;
}

// A walk's key pool backward (Backward::key_pool): each key tile's CTA reads its segment's keys
// again (L2's), and the arg-max's CTA (counted as the first tile's) dy's row and dk's element a
// column, read and written.
TEST(FusedTraffic, AWalksKeyPoolReadsItsSegmentsKeysAgain) {
  const Buffers b(128);
  auto bw = backward_of(b, one_segment(b, 128));
  const auto before = fused::traffic(bw);
  std::vector<char> dy(D * 4);
  bw.key_pool = one_segment_max(b.k.data(), dy.data(), b.dk.data());
  bw.key_pool.dy_acc = true;
  const auto t = fused::traffic(bw);
  EXPECT_DOUBLE_EQ(t.requested() - before.requested(), 2 * 128 * kRow + D * 4 + 2 * kRow);
  EXPECT_DOUBLE_EQ(t.unique - before.unique, D * 4 + kRow);  // k read already; dk's row written
  EXPECT_DOUBLE_EQ(t.loaded, before.loaded);                 // plain loads
}

// A query pool's backward (Backward::query_pool): the CTA of the segment's one query (fixed's
// local pass: a block of 128 keys, unmasked) reads the block's rows of x again, and the query's
// gradient as it stored it, and reads and writes dx's element a column (counted at the block's
// first row).
TEST(FusedTraffic, AQueryPoolReadsItsBlocksRowsAgain) {
  const Buffers b(128);
  auto p = one_segment(b, 128);
  p.query = {1, 1, 1, 1, 1, 0};
  p.mask = fused::Mask::kNone;
  auto bw = backward_of(b, p);
  bw.dq.stride[0] = bw.dq.stride[1] = D;  // [1, 1, 1, D], contiguous: the pool reads it as dy
  ASSERT_EQ(fused::backward_launches(bw), 2);
  const auto before = fused::traffic(bw);
  const std::vector<char> x(128 * kRow), dx(128 * kRow);  // the pooled q and its gradient
  bw.query_pool = one_segment_max(x.data(), bw.dq.data, dx.data());
  ASSERT_TRUE(fused::query_pool_backward_fits(bw));
  const auto t = fused::traffic(bw);
  EXPECT_DOUBLE_EQ(t.requested() - before.requested(), 128 * kRow + kRow + 2 * kRow);
  // x's rows and dx's row new; the query's gradient row written by the pass, read now.
  EXPECT_DOUBLE_EQ(t.unique - before.unique, 128 * kRow + kRow + 2 * kRow);
  EXPECT_DOUBLE_EQ(t.loaded, before.loaded);  // plain loads
}

TEST(FusedTraffic, ScansTouchEachElementOnceATensor) {
  std::vector<char> x(4096), y(4096);
  fused::RunningMaxes r;
  r.count = 1;
  fused::RunningMax& s = r.part[0];
  s.outer[0] = 2;
  s.inner = 8;
  s.n = 10;
  s.dtype = fused::Dtype::kBFloat16;
  s.x = x.data();
  s.y = y.data();
  EXPECT_DOUBLE_EQ(fused::traffic(r).unique, 2 * 8 * 10 * 2 * 2);  // x read, y written
  s.y = nullptr;
  s.dy = y.data();
  s.dx = x.data();
  EXPECT_DOUBLE_EQ(fused::traffic(r).unique, 2 * 8 * 10 * 2 * 3);  // x, dy read; dx written
  fused::SegmentMaxes m;
  m.count = 1;
  fused::SegmentMax& g = m.part[0];
  g.batch = 1;
  g.heads = 2;
  g.rows = 50;
  g.dim = 4;
  g.segments = 6;
  g.len = 8;
  g.dtype = fused::Dtype::kFloat32;
  g.x = x.data();
  g.y = y.data();
  EXPECT_DOUBLE_EQ(fused::traffic(m).unique, 2 * (48 + 6) * 4 * 4.0);
  g.y = nullptr;
  g.dy = y.data();
  g.dx = x.data();
  EXPECT_DOUBLE_EQ(fused::traffic(m).unique, 2 * (48 + 6 + 50) * 4 * 4.0);  // every dx row
  g.accumulate = true;
  EXPECT_DOUBLE_EQ(fused::traffic(m).unique, 2 * (48 + 3 * 6) * 4 * 4.0);
  g.dtype = fused::Dtype::kBFloat16;  // dy in float32: its 6 rows at 4 bytes, the rest at 2
  g.dy_acc = true;
  EXPECT_DOUBLE_EQ(fused::traffic(m).unique, 2 * ((48 + 2 * 6) * 4 * 2.0 + 6 * 4 * 4.0));
}

// Each launch of a real call carries its bytes: a delta launch its o and dO rows and the deltas,
// every launch at least one row, re-reads never fewer than the distinct bytes. (combiner-fixed at
// D 128, whose dk/dv walk shares a launch with dq, so that a delta launch makes o's delta:
// kernel_plan.h walk_makes_delta.)
TEST(FusedTraffic, EveryLaunchOfACallCarriesItsBytes) {
  constexpr int64_t D = 128;
  auto m = make_attention({"combiner-fixed", 8, 8, "max"}, 64, D);
  m->set_path(AttentionImpl::Path::kFused);
  torch::manual_seed(3);
  auto q = torch::randn({2, 3, 64, D}).requires_grad_(), k = torch::randn({2, 3, 64, D}),
       v = torch::randn({2, 3, 64, D});
  std::vector<fused_launch::LaunchTime> times;
  {
    fused_launch::LaunchTimes timer;
    m->forward(q, k, v).sum().backward();
    times = timer.times();
  }
  ASSERT_FALSE(times.empty());
  bool saw_delta = false;
  for (const auto& t : times) {
    EXPECT_GE(t.bytes.unique, 8 * 4) << t.what;
    EXPECT_GE(t.bytes.requested(), t.bytes.unique) << t.what;
    if (t.what == "delta: 64 rows") {
      saw_delta = true;
      EXPECT_DOUBLE_EQ(t.bytes.unique, 6 * 64 * (2 * D * 4 + 4));
    }
  }
  EXPECT_TRUE(saw_delta);
}

}  // namespace
}  // namespace combiner::attention
