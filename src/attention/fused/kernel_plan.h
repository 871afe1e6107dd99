// Which launches a fused call makes: the passes whose backward is one CTA per segment, the pools
// made and taken back on chip, the walks interleaved with dq, and the pairs of passes run in one
// launch. The glue plans a call by these rules and the kernels are built by them, so that the CPU
// model counts what a GPU launches.
#pragma once

#include "attention/fused/kernel_index.h"

namespace combiner::attention::fused {

// Kernels one call launches on a GPU (kernel_*.cu): the forward and the delta one each; the
// backward its dk/dv walk (source A's keys, and source B's by segment, in one launch), the
// summary-gradient walk where the pass reads summaries by prefix, and dq (the walk and dq in one
// launch where interleaved_backward allows); or, for a pass whose segments each fit one tile
// (segment_backward), one launch. The glue counts these for the CPU model too, so that
// combiner-bench --count says a GPU's launches (backward_launches).
COMBINER_HD bool prefix_summaries(const Pass& p) {
  return p.summaries && !p.by_segment && p.summary_count > 0;
}
// Not for float32 at D 128, whose dk/dv walk alone takes every register: its CUDA instance
// would spill.
COMBINER_HD constexpr bool segment_backward_built(Dtype dtype, int64_t dim) {
  return dtype != Dtype::kFloat32 || dim <= 64;
}
// Whether every segment (or pack group) of the pass is one query tile (kQueryTile rows: one or
// two of the key-side walk's) and one key tile of each source, owned by no other segment: then one
// CTA per segment computes its dk, dv (and dks, du) and, from the same dS, its dq, in one launch
// (no dq kernel reading q, dO, k and v again and recomputing the scores). Two sources only at
// D <= 64 (the first's dq waits in shared memory, for which D 128 has no room beside the walk's).
// Vertical's passes at L 3072 with rows of 48, and its columns of 32 at rows of 96, two to a tile,
// are such passes; summaries by prefix, every later segment's, are not.
COMBINER_HD bool segment_backward(const Pass& p) {
  if (!segment_backward_built(p.dtype, p.dim)) return false;
  if (p.summaries && (!p.by_segment || p.dim > 64)) return false;
  const int64_t pack = segment_pack(p), segments = p.query.segments;
  if (pack * p.query.seg_len > kQueryTile) return false;
  if (pack * p.key.seg_len > kKeyTile || p.key.segments != segments) return false;
  return !p.summaries ||
         (pack * p.summary_key.seg_len <= kKeyTile && p.summary_key.segments == segments);
}
// Whether a local pass can make its pools in its own tiles (Pass::pooled): its queries pooled
// from the same rows of q as its keys are of k (pooled_query = key: the pooled queries and keys
// are one running max of q and one of k down the segment), its query rows those rows moved by a
// constant (query_source_row), every key seen by the last query (kCausal, kNone: the forward
// loads them all; kNone only where a segment is one key tile). Query tile x of a segment and its
// key tile x are then the same indices: the forward's CTA of query tile x pools its tile and
// writes its key tile x's running max (pooled_key_tile, the last it walks), the backward's dq CTA
// pools its query tile and its dk/dv walk each query tile as it lands, each carried from the
// segment's rows before its first tile, which it reads from q and k again. (That `query` and
// `pooled_keys` count as many rows per segment is the glue's to check.) Vertical's local pass
// (columns of 63 rows at L 3072, W 48; of 127 at L 12288, W 96) and horizontal's two (rows of 48,
// 96, 192) are such passes.
COMBINER_HD bool same_rows(const Geometry& a, const Geometry& b) {
  return a.segments == b.segments && a.seg_len == b.seg_len && a.seg_stride == b.seg_stride &&
         a.row_stride == b.row_stride && a.limit == b.limit && a.first == b.first;
}
COMBINER_HD bool pools_on_chip(const Pass& p) {
  return !p.summaries &&
         (p.mask == Mask::kCausal || (p.mask == Mask::kNone && p.key.seg_len <= kKeyTile)) &&
         same_rows(p.pooled_query, p.key) && p.query.segments == p.key.segments &&
         p.query.seg_len == p.key.seg_len && p.query.seg_stride == p.key.seg_stride &&
         p.query.row_stride == p.key.row_stride;
}
// Whether its backward can also run the pools' backward in its epilogue (Backward::pools_dq): one
// CTA per segment (segment_backward), whose tiles hold the segment's queries and keys and all
// their gradients. Vertical's local pass at L 3072 (two columns to a tile at W 96) and
// horizontal's at rows of 48 are such passes; where the segment is longer than a tile, the pool
// kernel takes the pools' backward from the gradients the pass stores.
COMBINER_HD bool pools_backward_on_chip(const Pass& p) {
  return pools_on_chip(p) && segment_backward(p);
}
// The key tile of source A whose running max query CTA `cta` of a pooled pass writes: its own
// indices' (kQueryTile == kKeyTile), its last (pools_on_chip), the one a packed CTA has.
static_assert(kQueryTile == kKeyTile, "a pooled pass's query tile x and key tile x are one range");
COMBINER_HD int64_t pooled_key_tile(const Pass& p, int64_t cta) {
  return segment_pack(p) > 1 ? 0 : index_mod(cta, query_chunks(p));
}
// Whether a plain max pool of `segments` segments of `len` keys (rows g * len + t of k, as
// SegmentMax reads them) can be made by the pass's CTAs (Forward::key_pool): unpacked, source A's
// segment g those rows, unmasked, and a query in every pooled segment (a CTA that runs). The
// first query tile's CTA of segment g takes the max from its one key tile, or, where the
// segment is longer than a tile, from k's rows again after its walk. Rowmajor's and fixed's
// local passes are such passes.
COMBINER_HD bool key_pool_on_chip(const Pass& p, int64_t segments, int64_t len) {
  const Geometry& k = p.key;
  if (segments <= 0 || p.summaries || p.pooled || p.mask != Mask::kNone) return false;
  if (segment_pack(p) != 1 || segments > p.query.segments) return false;
  if (k.first != 0 || k.row_stride != 1 || k.seg_stride != len || k.seg_len != len ||
      segments > k.segments || k.limit < segments * len)
    return false;
  for (int64_t g = 0; g < segments; ++g)
    if (valid_count(p.query, g) == 0) return false;
  return true;
}
// Whether the pass's CTAs can also take such a pool's backward (Backward::key_pool): one CTA
// per segment (segment_backward), whose one key tile holds the segment's rows and their arg-max;
// else the dk/dv walk's CTA of each key tile (unpacked), which reads its segment's rows of k
// again for each column's arg-max and adds where that row is one of its tile's. Rowmajor's and
// fixed's local passes: at rows and blocks of at most 64, and of 96 (two key tiles) and more.
COMBINER_HD bool key_pool_backward_on_chip(const Pass& p, int64_t segments, int64_t len) {
  return key_pool_on_chip(p, segments, len);
}
// Whether `m` is such a pool of the pass's own k (the backward's: adding into dx).
COMBINER_HD bool key_pool_fits(const Pass& p, const SegmentMax& m, bool backward) {
  return (backward ? key_pool_backward_on_chip(p, m.segments, m.len)
                   : key_pool_on_chip(p, m.segments, m.len)) &&
         m.batch == p.batch && m.heads == p.heads && m.dim == p.dim && m.dtype == p.dtype &&
         m.x == p.k.data && m.stride[0] == p.k.batch && m.stride[1] == p.k.head &&
         m.stride[2] == p.k.row && (!backward || m.accumulate);
}
// Whether a plain max pool of `segments` segments of `len` rows can be made as the pass's
// queries by its CTAs (Forward::query_pool): one unpacked CTA per segment, whose one query
// (segment g's is row g: query.first 0, seg_stride 1) is the max of its rows (the first
// kQueryTile loaded in its query tile, the rest read from x), and no summaries or pooled queries
// besides. Fixed's local pass at blocks of more than 32 (shorter blocks pack) is such a pass.
COMBINER_HD bool query_pool_on_chip(const Pass& p, int64_t segments, int64_t len) {
  const Geometry& q = p.query;
  if (segments <= 0 || len < 1 || p.summaries || p.pooled) return false;
  return segment_pack(p) == 1 && q.segments == segments && q.seg_len == 1 && q.first == 0 &&
         q.seg_stride == 1 && q.limit == segments;
}
// Whether `m` makes the pass's queries so: y, contiguous [B, H, segments, D], is pass.q.
COMBINER_HD bool query_pool_fits(const Pass& p, const SegmentMax& m) {
  return query_pool_on_chip(p, m.segments, m.len) && m.batch == p.batch && m.heads == p.heads &&
         m.dim == p.dim && m.dtype == p.dtype && m.y == p.q.data && !m.accumulate &&
         p.q.row == m.dim && p.q.head == m.segments * m.dim &&
         p.q.batch == m.heads * m.segments * m.dim;
}
// Whether the backward can take such a pool back in the CTAs of its queries
// (Backward::query_pool): the pass the forward's (query_pool_on_chip: segment g's one query is
// its CTA's), one slab of dy, which is the pass's own dq as it stores it, whole (no addend) and
// contiguous [B, H, segments, D], read in the dtype it is stored in, added into dx.
COMBINER_HD bool query_pool_backward_fits(const Backward& b) {
  const Pass& p = b.pass;
  const SegmentMax& m = b.query_pool;
  if (!query_pool_on_chip(p, m.segments, m.len) || m.batch != p.batch || m.heads != p.heads ||
      m.dim != p.dim || m.dtype != p.dtype || !m.accumulate || m.dy_slabs != 1)
    return false;
  const GradOut& dy = b.dq;
  const bool acc = dy.kind == GradOut::kStoreAcc && p.dtype == Dtype::kBFloat16;
  return (dy.kind == GradOut::kStore || dy.kind == GradOut::kStoreAcc) && dy.addend == nullptr &&
         m.dy == dy.data && m.dy_acc == acc && dy.stride[2] == m.dim &&
         dy.stride[1] == m.segments * m.dim && dy.stride[0] == m.heads * m.segments * m.dim;
}
// The dk/dv walk's CTAs: one per key tile of source A's segments (a pack group's: one), then
// (by segment) of B's.
COMBINER_HD int64_t key_ctas(const Pass& p, bool b) {
  const Geometry& g = b ? p.summary_key : p.key;
  const int64_t pack = segment_pack(p);
  return pack > 1 ? index_ceil_div(g.segments, pack) : g.segments * ceil_div(g.seg_len, kKeyTile);
}
COMBINER_HD int64_t dkv_ctas(const Pass& p) {
  return key_ctas(p, false) + (p.summaries && p.by_segment ? key_ctas(p, true) : 0);
}

// The dk/dv walk and dq in one launch (a pass that is not segment_backward; its summaries by
// prefix, if any, keep their launch): the CTAs of each segment, or pack group, in turn, its
// source A key tiles, then its source B key tiles by segment, then its query tiles. A segment's
// dq CTAs read the rows of q, d_o, k and v (and the spans) that its dk/dv CTAs have just read,
// while L2 still holds them; two launches read them a whole pass apart, from DRAM each time
// (the row pass of vertical at W 96: two query tiles and two key tiles of each source per row).
// Where:
//  - D is 128, where the dq kernel and the dk/dv kernel hold as many CTAs per SM (two at
//    bfloat16, one at float32) and the one kernel takes the larger of their registers and shared
//    memory, so neither loses a CTA (at D 64 the dq kernel holds three, the walk two);
//  - no CTA writes a row that another reads: dq is not written over d_o (Backward: the local
//    passes' qs gradient over u's), and the walk reads no gradient dq writes;
//  - every source has the queries' segments, so that each segment owns its CTAs of each kind.
COMBINER_HD constexpr bool interleaved_backward_built(int64_t dim) {
  return dim == 128;
}
// Whether a pass that is not segment_backward can make o's delta in its dk/dv walk
// (Backward::made_delta): the CTA of each segment's first key tile walks every query of the
// segment (a query tile's walk starts at the first that can see its keys: for key 0, query 0), so
// every row is written by one CTA, in the walk's launch, before the launches that read it. Where:
// unpacked; no summaries by segment (their walk shares the launch, and would read rows being
// written); dq in a launch of its own (not at D 128, where interleaved_backward runs its CTAs
// beside the walk's); every segment with a query has a key (else no CTA walks its queries).
// Every walk CTA reads o's rows of the query tiles it walks (each key tile's CTA makes their
// deltas again): unmasked, every row once a key tile (combiner-fixed's pooled queries, one row a
// block); causal, the rows from the key tile's on. A segment of one key tile reads o once, where
// the delta launch reads o and d_o.
COMBINER_HD bool walk_makes_delta(const Pass& p) {
  if (segment_backward(p) || segment_pack(p) != 1 || interleaved_backward_built(p.dim))
    return false;
  if (p.summaries && p.by_segment) return false;
  for (int64_t g = 0; g < p.query.segments; ++g)
    if (valid_count(p.query, g) > 0 && (g >= p.key.segments || valid_count(p.key, g) == 0))
      return false;
  return true;
}
// Whether the pass's backward can make o's delta itself (Backward::made_delta).
COMBINER_HD bool makes_delta_built(const Pass& p) {
  return segment_backward(p) || walk_makes_delta(p);
}
COMBINER_HD bool interleaved_backward(const Backward& b) {
  const Pass& p = b.pass;
  if (!b.interleave || !interleaved_backward_built(p.dim) || segment_backward(p)) return false;
  if (b.dq.data != nullptr && b.dq.data == b.d_o.data) return false;
  const bool b_walk = p.summaries && p.by_segment;
  return p.key.segments == p.query.segments &&
         (!b_walk || p.summary_key.segments == p.query.segments);
}
// CTA x of the one launch: a dk/dv CTA of `keys` (kSourceA or kSegmentSummaries), or (`dq`) a
// query CTA, numbered as in its own launch.
struct BackwardCta {
  Keys keys = Keys::kSourceA;
  bool dq = false;
  int64_t cta = 0;
};
COMBINER_HD int64_t interleaved_ctas(const Pass& p) {
  return dkv_ctas(p) + query_ctas(p);
}
COMBINER_HD BackwardCta interleaved_cta(const Pass& p, int64_t x) {
  const bool packed = segment_pack(p) > 1;
  const int64_t a = packed ? 1 : index_ceil_div(p.key.seg_len, kKeyTile);
  const bool b_walk = p.summaries && p.by_segment;
  const int64_t s = !b_walk ? 0 : packed ? 1 : index_ceil_div(p.summary_key.seg_len, kKeyTile);
  const int64_t q = packed ? 1 : index_ceil_div(p.query.seg_len, kQueryTile);
  const int64_t per = a + s + q, g = index_div(x, per), r = x - g * per;
  BackwardCta c;
  if (r < a) {
    c.cta = g * a + r;
  } else if (r < a + s) {
    c.keys = Keys::kSegmentSummaries;
    c.cta = g * s + r - a;
  } else {
    c.dq = true;
    c.cta = g * q + r - a - s;
  }
  return c;
}

COMBINER_HD int64_t backward_launches(const Backward& b) {
  if (segment_backward(b.pass)) return 1;
  return (interleaved_backward(b) ? 1 : 2) + (prefix_summaries(b.pass) ? 1 : 0);
}

// A segment's rows in a geometry whose segments never share a row (each segment's rows lie
// within one seg_stride, or the segments interleave within one row_stride).
COMBINER_HD bool disjoint(const Geometry& g) {
  const int64_t row = g.row_stride < 0 ? -g.row_stride : g.row_stride;
  const int64_t seg = g.seg_stride < 0 ? -g.seg_stride : g.seg_stride;
  return row * g.seg_len <= seg || seg * g.segments <= row;
}
// Whether every row of b's segment g is a row of a's segment g: the same places, b's segments
// no more and no longer.
COMBINER_HD bool within_segments(const Geometry& b, const Geometry& a) {
  return b.first == a.first && b.seg_stride == a.seg_stride && b.row_stride == a.row_stride &&
         b.segments <= a.segments && b.seg_len <= a.seg_len;
}
// The rows of q a pass reads: its queries', or a pooled pass's pooled_query.
COMBINER_HD const Geometry& query_source_rows(const Pass& p) {
  return p.pooled ? p.pooled_query : p.query;
}
// Whether b's CTA x covers segments of a's CTA x only, reading q, k and v rows among theirs:
// the same shape of call, neither reading summaries, the same packing and chunks, and b's
// segments within a's.
COMBINER_HD bool same_ctas(const Pass& a, const Pass& b) {
  if (a.dtype != b.dtype || a.dim != b.dim || a.batch != b.batch || a.heads != b.heads)
    return false;
  if (a.summaries || b.summaries || segment_pack(a) != segment_pack(b)) return false;
  if (query_chunks(a) != query_chunks(b)) return false;
  return within_segments(b.query, a.query) && within_segments(b.key, a.key) &&
         within_segments(b.value, a.value) &&
         within_segments(query_source_rows(b), query_source_rows(a));
}
// A forward pair: besides, neither merges, each writes its own o and lse (that neither reads
// the other's outputs is the caller's to keep), neither makes a delta or a query pool, and the
// first no key pool.
COMBINER_HD bool pairable(const Forward& a, const Forward& b) {
  return same_ctas(a.pass, b.pass) && !a.merge && !b.merge && a.o != b.o && a.lse != b.lse &&
         !a.delta.delta && !b.delta.delta && a.key_pool.segments == 0 &&
         a.query_pool.segments == 0 && b.query_pool.segments == 0;
}
// The rows of the query-side gradient a backward writes: its queries', or, where it runs its
// pools' backward, q's rows that it pooled.
COMBINER_HD const Geometry& query_gradient_rows(const Backward& b) {
  return b.pools_dq.kind != GradOut::kNone ? b.pass.pooled_query : b.pass.query;
}
// Two walks in two launches (not one CTA per segment, nor at D 128, where each pass's walk and dq
// already share a launch: interleaved_backward): both passes' dk/dv walks in one launch, then
// both dq in another, where there were four. Key CTA x is the same key tile of the same segment
// (or pack group) in both, so unpacked their segments are as many key tiles long; neither pass
// has its pools' backward (pools_dq: segment_backward's), and neither writes dq over a d_o, which
// another CTA of the dq launch may read. (The second's key pool backward runs in its walk.)
// Rowmajor's row pass and its local pass at rows of 96 (CIFAR-10) and 192 (ImageNet-64), D 64:
// each row two or three query and key tiles.
COMBINER_HD bool walks_pairable(const Backward& a, const Backward& b) {
  const Pass &p = a.pass, &r = b.pass;
  if (segment_backward(p) || segment_backward(r) || interleaved_backward_built(p.dim)) return false;
  if (a.pools_dq.kind != GradOut::kNone || b.pools_dq.kind != GradOut::kNone) return false;
  const auto over_d_o = [](const Backward& x) {
    return x.dq.data != nullptr && x.dq.data == x.d_o.data;
  };
  if (over_d_o(a) || over_d_o(b)) return false;
  return segment_pack(p) > 1 ||
         ceil_div(p.key.seg_len, kKeyTile) == ceil_div(r.key.seg_len, kKeyTile);
}
// A backward pair: besides, both one CTA per segment (segment_backward: the pair kernel is built
// wherever that pass's kernel is, kernel_backward.cu segment_pair_kernel) or two walks
// (walks_pairable), neither making a delta nor taking a query pool back, the first no key pool,
// every gradient row the second writes in CTA x one the first writes in CTA x, in segments that
// share no row: no CTA touches a row another CTA writes. (That the second reads nothing the
// first writes but its addends is the caller's to keep.)
COMBINER_HD bool pairable(const Backward& a, const Backward& b) {
  const Pass &p = a.pass, &r = b.pass;
  const bool segments = segment_backward(p) && segment_backward(r);
  if (!(segments || walks_pairable(a, b)) || !same_ctas(p, r)) return false;
  if (a.made_delta || b.made_delta || a.summary_delta || b.summary_delta) return false;
  if (a.key_pool.segments != 0 || a.query_pool.segments != 0 || b.query_pool.segments != 0)
    return false;
  const Geometry &aq = query_gradient_rows(a), &bq = query_gradient_rows(b);
  return disjoint(aq) && disjoint(p.key) && disjoint(p.value) && within_segments(bq, aq);
}
// A pair's launches: one, or two for two walks (dk/dv, then dq).
COMBINER_HD int64_t backward_launches(const BackwardPair& b) {
  return segment_backward(b.first.pass) ? 1 : 2;
}

}  // namespace combiner::attention::fused
