// The tiles the fused kernels index by (attention/fused/kernel_index.h: segment_pack, query_ctas,
// tile_query, query_tile_keys, tile_key, key_ctas, dkv_key, packed_query), which the CPU model
// and the CUDA kernels share: over the joint passes of every fused variant's plan, and a local
// pass of each shape, at layouts with short last rows, long columns and packed ones,
//  - every query is one row of exactly one query tile;
//  - every key of source A, and of source B by segment, is one column of exactly one dk/dv tile,
//    whose walk reaches every query of its segment that sees it;
//  - a query tile's key tiles hold each key its queries see exactly once: none missed, none
//    counted twice in a softmax.
// The numerical tests (fused_test.cpp, kernel-check) hold the results; this holds the indexing on
// its own, at the sizes the numerical tests cannot afford (CIFAR-10's L 3072, W 96).
#include <gtest/gtest.h>

#include "attention/fused/fused.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace combiner::attention {
namespace {

using fused::TileIndex;

struct PlanCase {
  std::string name;
  fused::Pass pass;
};

fused::Pass pass_of(const FusedPass& fp) {
  fused::Pass p;
  p.query = fp.query;
  p.key = fp.key;
  p.value = fp.value;
  p.mask = fp.mask;
  p.summaries = fp.summaries;
  p.by_segment = fp.summaries && fp.by_segment;
  p.summary_count = fp.summaries && !fp.by_segment ? fp.query.segments - 1 : 0;
  p.summary_key = fp.summary_key;
  p.summary_value = fp.summary_value;
  p.summary_mask = fp.summary_mask;
  return p;
}

std::vector<PlanCase> plan_cases() {
  std::vector<PlanCase> out;
  const std::vector<std::pair<int64_t, int64_t>> layouts = {
      {64, 8}, {163, 24}, {288, 96}, {768, 24}, {1584, 24}, {3072, 96}, {3072, 48}};
  for (const auto& [L, W] : layouts) {
    const auto add = [&](const std::string& variant, const std::vector<FusedPass>& passes) {
      for (size_t i = 0; i < passes.size(); ++i)
        out.push_back({variant + " L" + std::to_string(L) + " W" + std::to_string(W) + " pass " +
                           std::to_string(i),
                       pass_of(passes[i])});
    };
    add("fixed", fixed_joint_passes(L, W));
    add("rowmajor", rowmajor_joint_passes(L, W));
    add("vertical", vertical_joint_passes(L, W));
    add("horizontal", horizontal_joint_passes(L, W));
    // The local passes' shapes: a column's causal attention (vertical), a row read right to left
    // (horizontal's suffixes).
    const int64_t n = (L + W - 1) / W, spans = n - 1;
    FusedPass column;
    column.query = column.key = column.value = {W, spans, 1, W, spans * W};
    column.mask = fused::Mask::kCausal;
    add("local column", {column});
    FusedPass suffix;
    suffix.query = {spans, W, W, -1, 2 * spans * W, spans * W + W - 1};
    suffix.key = suffix.value = {spans, W, W, -1, spans * W, W - 1};
    suffix.mask = fused::Mask::kCausal;
    add("local suffix", {suffix});
  }
  return out;
}

using Index = std::pair<int64_t, int64_t>;  // (segment, index)

bool sees(const fused::Pass& p, bool b, int64_t t, int64_t j) {
  return b ? fused::summary_allows(p, t, j) : fused::mask_allows(p.mask, t, j);
}
int64_t key_count(const fused::Pass& p, bool b, int64_t g) {
  return b ? fused::summary_terms(p, g) : fused::valid_count(p.key, g);
}

TEST(FusedTiles, EveryQueryIsOneRowOfOneTile) {
  for (const auto& c : plan_cases()) {
    const auto& p = c.pass;
    std::map<Index, int> rows;
    for (int64_t cta = 0; cta < fused::query_ctas(p); ++cta)
      for (int64_t r = 0; r < fused::kQueryTile; ++r) {
        const TileIndex q = fused::tile_query(p, cta, r);
        if (q.valid) ++rows[{q.g, q.i}];
      }
    int64_t queries = 0;
    for (int64_t g = 0; g < p.query.segments; ++g)
      for (int64_t t = 0; t < fused::valid_count(p.query, g); ++t, ++queries)
        ASSERT_EQ(rows[Index(g, t)], 1) << c.name << ": query " << t << " of segment " << g;
    EXPECT_EQ(int64_t(rows.size()), queries) << c.name;
  }
}

TEST(FusedTiles, EveryKeyIsOneColumnOfOneDkvTileWhoseWalkReachesItsQueries) {
  for (const auto& c : plan_cases()) {
    const auto& p = c.pass;
    const bool packed = fused::segment_pack(p) > 1;
    for (const bool b : {false, true}) {
      if (b && !(p.summaries && p.by_segment)) continue;
      const fused::Mask mask = b ? p.summary_mask : p.mask;
      const int64_t MQ = fused::backward_query_tile(64);
      std::map<Index, int> columns;
      for (int64_t cta = 0; cta < fused::key_ctas(p, b); ++cta) {
        // The queries this CTA walks (kernel_cpu.cpp backward_dkv_tile).
        const TileIndex first = fused::dkv_key(p, b, cta, 0);
        std::set<Index> walked;
        if (packed) {
          for (int64_t f = 0; f < fused::segment_pack(p) * p.query.seg_len; ++f) {
            const TileIndex q = fused::packed_query(p, cta, f);
            if (q.valid) walked.insert({q.g, q.i});
          }
        } else {
          for (int64_t f = fused::first_query_tile(mask, first.i, MQ);
               f < fused::valid_count(p.query, first.g);
               ++f)
            walked.insert({first.g, f});
        }
        for (int64_t col = 0; col < fused::kKeyTile; ++col) {
          const TileIndex k = fused::dkv_key(p, b, cta, col);
          if (!k.valid) continue;
          ++columns[{k.g, k.i}];
          for (int64_t t = 0; t < fused::valid_count(p.query, k.g); ++t)
            if (sees(p, b, t, k.i)) {
              ASSERT_TRUE(walked.count({k.g, t}))
                  << c.name << (b ? ", source B" : "") << ": key " << k.i << " of segment " << k.g
                  << " misses query " << t;
            }
        }
      }
      const auto& at = b ? p.summary_key : p.key;
      int64_t keys = 0;
      for (int64_t g = 0; g < at.segments; ++g)
        for (int64_t j = 0; j < key_count(p, b, g); ++j, ++keys)
          ASSERT_EQ(columns[Index(g, j)], 1)
              << c.name << (b ? ", source B" : "") << ": key " << j << " of segment " << g;
      EXPECT_EQ(int64_t(columns.size()), keys) << c.name;
    }
  }
}

TEST(FusedTiles, AQueryTileHoldsEachKeyItsQueriesSeeOnce) {
  for (const auto& c : plan_cases()) {
    const auto& p = c.pass;
    for (int64_t cta = 0; cta < fused::query_ctas(p); ++cta) {
      const auto n = fused::query_tile_keys(p, cta);
      std::map<std::pair<bool, Index>, int> held;  // (source B, (segment, key)) -> columns
      for (int64_t tile = 0; tile < n.total; ++tile)
        for (int64_t col = 0; col < fused::kKeyTile; ++col) {
          const TileIndex k = fused::tile_key(p, cta, tile, n.direct, col);
          if (k.valid) ++held[{tile >= n.direct, {k.g, k.i}}];
        }
      for (const auto& [key, count] : held)
        ASSERT_EQ(count, 1) << c.name << ": tile " << cta << " holds a key twice";
      for (int64_t r = 0; r < fused::kQueryTile; ++r) {
        const TileIndex q = fused::tile_query(p, cta, r);
        if (!q.valid) continue;
        for (const bool b : {false, true}) {
          if (b && !p.summaries) continue;
          for (int64_t j = 0; j < key_count(p, b, q.g); ++j)
            if (sees(p, b, q.i, j)) {
              ASSERT_TRUE(held.count({b, {q.g, j}}))
                  << c.name << (b ? ", source B" : "") << ": query " << q.i << " of segment " << q.g
                  << " misses key " << j;
            }
        }
      }
    }
  }
}

// The kernels test a score's mask as a set of columns per row (kernel_index.h Visible): the same
// rule as mask_allows, for every mask, position and origin.
TEST(FusedTiles, VisibleSetsAreTheMaskRule) {
  for (const auto mask :
       {fused::Mask::kNone, fused::Mask::kCausal, fused::Mask::kStrict, fused::Mask::kOthers})
    for (int count = 0; count <= 6; ++count)
      for (int at = 0; at <= 7; ++at)
        for (int origin = -4; origin <= 4; ++origin)
          for (int c = -12; c <= 12; ++c) {
            const int x = origin + c;  // the key (or query) column c stands for
            const bool in = x >= 0 && x < count;
            ASSERT_EQ(fused::visible(fused::from(fused::keys_seen(mask, at, count), origin), c),
                      in && fused::mask_allows(mask, at, x))
                << "query " << at << ", key " << x << ", mask " << int(mask);
            if (origin >= 0 && c >= 0) {  // unpacked query rows: the set starts at or before c
              ASSERT_EQ(fused::visible_in_prefix(
                            fused::from(fused::keys_seen(mask, at, count), origin), c),
                        in && fused::mask_allows(mask, at, x));
            }
            ASSERT_EQ(
                fused::visible(fused::from(fused::queries_seeing(mask, at, count), origin), c),
                in && fused::mask_allows(mask, x, at))
                << "key " << at << ", query " << x << ", mask " << int(mask);
          }
}

// The sets the kernels build from a row's own segment (keys_seen, queries_seeing, from): a
// query tile's row sees column c of a key tile iff that column holds a key of its segment that
// it sees (packed: columns seg x seg_len + j, seg the row's segment in the group); a dk/dv tile's
// key is seen by walk query f iff f is a query of its segment that sees it (packed: f = seg x
// query.seg_len + t). Over every plan, at the sizes kernel-check cannot afford.
TEST(FusedTiles, ARowsVisibleColumnsAreItsSegmentsKeysItSees) {
  for (auto c : plan_cases()) {
    const auto& p = c.pass;
    const int64_t pack = fused::segment_pack(p);
    for (int64_t cta = 0; cta < fused::query_ctas(p); ++cta) {
      const auto n = fused::query_tile_keys(p, cta);
      for (int64_t tile = 0; tile < n.total; ++tile) {
        const bool b = tile >= n.direct;
        const fused::Mask mask = b ? fused::summary_mask_of(p) : p.mask;
        const int j0 = int((b ? tile - n.direct : tile) * fused::kKeyTile);
        for (int64_t r = 0; r < fused::kQueryTile; ++r) {
          const TileIndex q = fused::tile_query(p, cta, r);
          fused::Visible v;
          if (q.valid && pack > 1) {
            const int64_t len = b ? p.summary_key.seg_len : p.key.seg_len;
            const auto& at = b ? p.summary_key : p.key;
            const int count = q.g < at.segments ? int(key_count(p, b, q.g)) : 0;
            v = fused::from(fused::keys_seen(mask, int(q.i), count),
                            -int((q.g - cta * pack) * len));
          } else if (q.valid) {
            const int last =
                int(std::min<int64_t>((cta % fused::query_chunks(p) + 1) * fused::kQueryTile,
                                      fused::valid_count(p.query, q.g)) -
                    1);
            const int count = int(b ? fused::summary_keys(p, q.g, last) : key_count(p, b, q.g));
            v = fused::from(fused::keys_seen(mask, int(q.i), count), j0);
          }
          for (int col = 0; col < fused::kKeyTile; ++col) {
            const TileIndex k = fused::tile_key(p, cta, tile, n.direct, col);
            const bool term = q.valid && k.valid && k.g == q.g && sees(p, b, q.i, k.i);
            ASSERT_EQ(fused::visible(v, col), term) << c.name << ": CTA " << cta << " tile " << tile
                                                    << " row " << r << " column " << col;
          }
        }
      }
    }
    for (const bool b : {false, true}) {
      if (b && !(p.summaries && p.by_segment)) continue;
      const fused::Mask mask = b ? p.summary_mask : p.mask;
      for (int64_t cta = 0; cta < fused::key_ctas(p, b); ++cta)
        for (int64_t col = 0; col < fused::kKeyTile; ++col) {
          const TileIndex k = fused::dkv_key(p, b, cta, col);
          const int64_t g = pack > 1 ? cta * pack : k.g;
          const int64_t walk = pack > 1 ? pack * p.query.seg_len : fused::valid_count(p.query, g);
          fused::Visible v;
          if (k.valid) {
            const int queries = k.g < p.query.segments ? int(fused::valid_count(p.query, k.g)) : 0;
            v = fused::from(fused::queries_seeing(mask, int(k.i), queries),
                            pack > 1 ? -int((k.g - g) * p.query.seg_len) : 0);
          }
          for (int64_t f = 0; f < walk; ++f) {
            const TileIndex q = pack > 1 ? fused::packed_query(p, cta, f)
                                         : TileIndex{g, f, f < fused::valid_count(p.query, g)};
            const bool term = k.valid && q.valid && q.g == k.g && sees(p, b, q.i, k.i);
            ASSERT_EQ(fused::visible(v, int(f)), term)
                << c.name << (b ? ", source B" : "") << ": key CTA " << cta << " column " << col
                << " query " << f;
          }
        }
    }
  }
}

// A segment_backward pass runs one CTA per query tile, which walks dk/dv CTA `cta` of source A
// and of source B by segment and adds their dS K into its dq: that CTA's keys must be exactly
// the keys its query tile holds, and its walk (one or two tiles) exactly the tile's queries, row
// f of the walk being row f of the query tile.
TEST(FusedTiles, ASegmentBackwardCtaHoldsItsQueriesAndTheirKeysAlone) {
  int64_t segment_passes = 0;
  for (const int64_t dim : {64, 128})
    for (auto c : plan_cases()) {
      auto& p = c.pass;
      p.dim = dim;
      p.dtype = fused::Dtype::kBFloat16;
      if (!fused::segment_backward(p)) continue;
      ++segment_passes;
      const bool packed = fused::segment_pack(p) > 1;
      ASSERT_EQ(fused::key_ctas(p, false), fused::query_ctas(p)) << c.name;
      if (p.summaries) {
        ASSERT_EQ(fused::key_ctas(p, true), fused::query_ctas(p)) << c.name;
      }
      for (int64_t cta = 0; cta < fused::query_ctas(p); ++cta) {
        for (int64_t f = 0; f < fused::kQueryTile; ++f) {
          const TileIndex q = fused::tile_query(p, cta, f);
          const TileIndex w = packed ? fused::packed_query(p, cta, f)
                                     : TileIndex{cta, f, f < fused::valid_count(p.query, cta)};
          ASSERT_EQ(w.valid, q.valid) << c.name << ": CTA " << cta << " row " << f;
          if (q.valid) {
            ASSERT_TRUE(w.g == q.g && w.i == q.i) << c.name << ": row " << f;
          }
        }
        const auto n = fused::query_tile_keys(p, cta);
        std::set<std::pair<bool, Index>> held, owned;
        for (int64_t tile = 0; tile < n.total; ++tile)
          for (int64_t col = 0; col < fused::kKeyTile; ++col) {
            const TileIndex k = fused::tile_key(p, cta, tile, n.direct, col);
            if (k.valid) held.insert({tile >= n.direct, {k.g, k.i}});
          }
        for (const bool b : {false, true}) {
          if (b && !p.summaries) continue;
          for (int64_t col = 0; col < fused::kKeyTile; ++col) {
            const TileIndex k = fused::dkv_key(p, b, cta, col);
            if (k.valid) owned.insert({b, {k.g, k.i}});
          }
        }
        // Every key the query tile holds is the CTA's (it may own more: keys no query of the tile
        // sees, under a causal mask, whose weights are zero), and each is of the tile's segments.
        for (const auto& key : held)
          ASSERT_TRUE(owned.count(key)) << c.name << ": CTA " << cta << " lacks a key of its tile";
        const int64_t pack = fused::segment_pack(p);
        for (const auto& key : owned)
          ASSERT_EQ(key.second.first / pack, cta)
              << c.name << ": CTA " << cta << " owns a key of another segment";
      }
    }
  EXPECT_GT(segment_passes, 20);
}

TEST(FusedTiles, SegmentBackwardTakesThePassesThatFitOneTile) {
  auto bf16 = [](const FusedPass& fp, int64_t dim = 64) {
    auto p = pass_of(fp);
    p.dim = dim;
    p.dtype = fused::Dtype::kBFloat16;
    return p;
  };
  // Vertical at L 3072: rows of 48 (the benchmark's layout) fit, with their spans; so do its
  // columns of 64. Rows of 96 (CIFAR-10's) do not; their columns of 32, two to a tile, do.
  for (const auto& fp : vertical_joint_passes(3072, 48))
    EXPECT_TRUE(fused::segment_backward(bf16(fp)));
  EXPECT_FALSE(fused::segment_backward(bf16(vertical_joint_passes(3072, 96).front())));
  EXPECT_TRUE(fused::segment_backward(bf16(vertical_joint_passes(3072, 96).back())));
  // At D 128 (the 128-layer preset's two heads of 128) the walk takes two tiles of 32 queries:
  // the columns still fit; rows with their spans (two sources) do not.
  EXPECT_TRUE(fused::segment_backward(bf16(vertical_joint_passes(3072, 96).back(), 128)));
  EXPECT_FALSE(fused::segment_backward(bf16(vertical_joint_passes(3072, 48).front(), 128)));
  // float32 at D 128: not built (its kernel would spill).
  auto f32 = bf16(vertical_joint_passes(3072, 96).back(), 128);
  f32.dtype = fused::Dtype::kFloat32;
  EXPECT_FALSE(fused::segment_backward(f32));
  // Summaries by prefix are every later segment's: no.
  EXPECT_FALSE(fused::segment_backward(bf16(fixed_joint_passes(3072, 48).front())));
}

// The dk/dv walk and dq in one launch (kernel_plan.h interleaved_backward): its CTAs are the two
// launches' CTAs, each once, a segment's (or pack group's) together, its key tiles before its
// query tiles.
TEST(FusedTiles, AnInterleavedBackwardRunsEachCtaOnceASegmentAtATime) {
  int64_t interleaved = 0, packed_ones = 0;
  for (auto c : plan_cases()) {
    fused::Backward bw;
    bw.pass = c.pass;
    bw.pass.dim = 128;
    bw.pass.dtype = fused::Dtype::kBFloat16;
    const auto& p = bw.pass;
    if (!fused::interleaved_backward(bw)) continue;
    ++interleaved;
    const bool packed = fused::segment_pack(p) > 1;
    packed_ones += packed;
    const int64_t a_tiles = packed ? 1 : (p.key.seg_len + fused::kKeyTile - 1) / fused::kKeyTile;
    const int64_t b_tiles =
        packed ? 1 : (p.summary_key.seg_len + fused::kKeyTile - 1) / fused::kKeyTile;
    const int64_t chunks = packed ? 1 : fused::query_chunks(p);
    std::set<std::pair<int, int64_t>> seen;  // (kind: A, B, dq; CTA)
    int64_t last_group = -1;
    bool queries_begun = false;
    for (int64_t x = 0; x < fused::interleaved_ctas(p); ++x) {
      const fused::BackwardCta cta = fused::interleaved_cta(p, x);
      const int kind = cta.dq ? 2 : cta.keys == fused::Keys::kSourceA ? 0 : 1;
      ASSERT_TRUE(seen.insert({kind, cta.cta}).second) << c.name << ": CTA " << x << " twice";
      const int64_t group = cta.cta / (kind == 0 ? a_tiles : kind == 1 ? b_tiles : chunks);
      ASSERT_GE(group, last_group) << c.name << ": CTA " << x << " goes back a segment";
      if (group > last_group) queries_begun = false;
      ASSERT_FALSE(queries_begun && !cta.dq) << c.name << ": a key tile after its queries";
      queries_begun = queries_begun || cta.dq;
      last_group = group;
    }
    const bool b = p.summaries && p.by_segment;
    for (int64_t i = 0; i < fused::key_ctas(p, false); ++i)
      ASSERT_TRUE(seen.count({0, i})) << c.name << ": source A's CTA " << i << " missing";
    for (int64_t i = 0; b && i < fused::key_ctas(p, true); ++i)
      ASSERT_TRUE(seen.count({1, i})) << c.name << ": source B's CTA " << i << " missing";
    for (int64_t i = 0; i < fused::query_ctas(p); ++i)
      ASSERT_TRUE(seen.count({2, i})) << c.name << ": query CTA " << i << " missing";
    EXPECT_EQ(int64_t(seen.size()), fused::interleaved_ctas(p)) << c.name;
  }
  EXPECT_GE(interleaved, 20);
  EXPECT_GE(packed_ones, 1);  // short segments with spans by segment, at D 128 not one CTA each
}

TEST(FusedTiles, TheWalkAndDqShareALaunchAtD128WhereNoCtaWritesWhatAnotherReads) {
  const auto at_d128 = [](const fused::Pass& p) {
    fused::Backward b;
    b.pass = p;
    b.pass.dim = 128;
    b.pass.dtype = fused::Dtype::kBFloat16;
    return b;
  };
  fused::Backward bw = at_d128(pass_of(vertical_joint_passes(3072, 96).front()));  // rows of 96
  EXPECT_TRUE(fused::interleaved_backward(bw));
  EXPECT_EQ(fused::backward_launches(bw), 1);
  int64_t rows[2];
  bw.d_o.data = rows;
  bw.dq.data = rows + 1;
  EXPECT_TRUE(fused::interleaved_backward(bw));
  bw.dq.data = rows;  // dq over d_o (the local passes' qs gradient over u's): two launches
  EXPECT_FALSE(fused::interleaved_backward(bw));
  EXPECT_EQ(fused::backward_launches(bw), 2);
  bw.dq.data = rows + 1;
  bw.interleave = false;
  EXPECT_FALSE(fused::interleaved_backward(bw));
  bw.interleave = true;
  bw.pass.dtype = fused::Dtype::kFloat32;
  EXPECT_TRUE(fused::interleaved_backward(bw));
  bw.pass.dim = 64;  // the dq kernel holds three CTAs per SM there, the walk two: two launches
  bw.pass.dtype = fused::Dtype::kBFloat16;
  EXPECT_FALSE(fused::interleaved_backward(bw));
  // Summaries by prefix keep their own launch: fixed's blocks of 96 at D 128 take two.
  const fused::Backward fixed = at_d128(pass_of(fixed_joint_passes(3072, 96).front()));
  EXPECT_TRUE(fused::interleaved_backward(fixed));
  EXPECT_EQ(fused::backward_launches(fixed), 2);
  // A pass of one CTA per segment is one launch as it was.
  const fused::Backward columns = at_d128(pass_of(vertical_joint_passes(3072, 96).back()));
  EXPECT_FALSE(fused::interleaved_backward(columns));
  EXPECT_EQ(fused::backward_launches(columns), 1);
}

TEST(FusedTiles, ColumnsOfThirtyTwoQueriesShareTilesTwoByTwo) {
  // CIFAR-10's rows of 96: vertical's column pass has 96 columns of 32 queries and 32 keys.
  const auto p = pass_of(vertical_joint_passes(3072, 96).back());
  ASSERT_EQ(p.query.seg_len, 32);
  EXPECT_EQ(fused::segment_pack(p), 2);
  EXPECT_EQ(fused::query_ctas(p), 48);
  EXPECT_EQ(fused::key_ctas(p, false), 48);
  // Its row pass (rows of 96 queries) is not packed.
  EXPECT_EQ(fused::segment_pack(pass_of(vertical_joint_passes(3072, 96).front())), 1);
}

TEST(FusedTiles, IndexArithmeticIsExactUpToTheLargestRows) {
  // The index rules divide in 32 bits (kernel_index.h index_div); checks.cpp keeps a head's rows
  // below 2^31, so quotients of rows, segments and tiles, and their sums with a divisor, stay below
  // 2^32.
  const int64_t big = (int64_t(1) << 31) - 1;
  for (int64_t a : {int64_t(0),
                    int64_t(1),
                    int64_t(63),
                    int64_t(64),
                    int64_t(3071),
                    big,
                    big + 1,
                    (int64_t(1) << 32) - 1})
    for (int64_t b : {int64_t(1), int64_t(3), int64_t(48), int64_t(64), big}) {
      EXPECT_EQ(fused::index_div(a, b), a / b) << a << " / " << b;
      EXPECT_EQ(fused::index_mod(a, b), a % b) << a << " % " << b;
      if (a + b - 1 < (int64_t(1) << 32)) {
        EXPECT_EQ(fused::index_ceil_div(a, b), (a + b - 1) / b) << a << " / " << b;
      }
    }
  // A geometry at the largest rows: rows 5, 5 + 2^30, ... below 2^31 - 1.
  fused::Geometry g;
  g.seg_len = 4;
  g.segments = 1;
  g.row_stride = int64_t(1) << 30;
  g.seg_stride = 4 * g.row_stride;
  g.first = 5;
  g.limit = big;
  EXPECT_EQ(fused::valid_count(g, 0), 2);
  g.row_stride = big - 1;  // the numerator's sum near 2^32
  g.first = 0;
  EXPECT_EQ(fused::valid_count(g, 0), 2);
  // segment_pack counts kQueryTile / seg_len without a division.
  for (int64_t len = 1; len <= 200; ++len) {
    fused::Pass p;
    p.query.seg_len = p.key.seg_len = len;
    EXPECT_EQ(fused::segment_pack(p), len <= fused::kQueryTile ? fused::kQueryTile / len : 1)
        << len;
  }
}

}  // namespace
}  // namespace combiner::attention
