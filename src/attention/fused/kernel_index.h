// The index rules of the fused kernels: where each row of a pass lies, which keys a query sees,
// and which queries and keys each CTA's tiles hold. Host and device functions, shared word for
// word by the CPU model and the CUDA kernels.
#pragma once

#include "attention/fused/kernel_pass.h"

namespace combiner::attention::fused {

// Where row r of (b, h) of a forward's o starts, in elements.
COMBINER_HD int64_t output_at(const Forward& f, int64_t b, int64_t h, int64_t r) {
  return b * f.o_stride[0] + h * f.o_stride[1] + r * f.o_stride[2];
}

// o's delta at index `at` of [B, H, rows] from its row's sum d_o . o: the sum, or where o is the
// mean of the call's output and another's (Delta::other_delta), the call's own, 2 x the sum less
// the other call's.
template <typename T>
COMBINER_HD T own_delta(T sum, const void* other_delta, int64_t at) {
  return other_delta ? T(2) * sum - static_cast<const T*>(other_delta)[at] : sum;
}

// Where row r of (b, h) of a gradient output starts, in elements.
COMBINER_HD int64_t grad_at(const GradOut& out, int64_t b, int64_t h, int64_t r) {
  return b * out.stride[0] + h * out.stride[1] + r * out.stride[2];
}

// Quotient and remainder of the indices the tiles are laid out by (rows, segments, tiles, CTAs:
// non-negative and below 2^32; checks.cpp keeps every row of a head below 2^31), in 32 bits.
// On the device a 64-bit division is a called routine, and each call site holds registers
// across the call.
COMBINER_HD int64_t index_div(int64_t a, int64_t b) {
  return int64_t(uint32_t(a) / uint32_t(b));
}
COMBINER_HD int64_t index_mod(int64_t a, int64_t b) {
  return int64_t(uint32_t(a) % uint32_t(b));
}

COMBINER_HD int64_t row_of(const Geometry& g, int64_t segment, int64_t t) {
  return g.first + segment * g.seg_stride + t * g.row_stride;
}

// The rows of q a pass loads: its query rows, or a pooled pass's pooled_query rows, which lie a
// constant number of rows from them (the same strides: pools_on_chip).
COMBINER_HD int64_t query_source_shift(const Pass& p) {
  return p.pooled ? p.pooled_query.first - p.query.first : 0;
}
COMBINER_HD int64_t query_source_row(const Pass& p, int64_t segment, int64_t t) {
  return row_of(p.query, segment, t) + query_source_shift(p);
}

// How many t of `segment` exist (they are always a prefix 0..count-1).
COMBINER_HD int64_t valid_count(const Geometry& g, int64_t segment) {
  const int64_t start = row_of(g, segment, 0);
  if (start < 0 || start >= g.limit) return 0;
  if (g.row_stride <= 0) return g.seg_len;
  const int64_t fit = index_div(g.limit - start + g.row_stride - 1, g.row_stride);
  return fit < g.seg_len ? fit : g.seg_len;
}

COMBINER_HD bool mask_allows(Mask mask, int64_t t, int64_t j) {
  return mask == Mask::kNone || (mask == Mask::kCausal   ? j <= t
                                 : mask == Mask::kStrict ? j < t
                                                         : j != t);
}

// The same rule as sets: the columns of a score tile one of its rows sees, lo <= c < hi and
// c != skip (skip lies outside [lo, hi) where the mask excludes no single column). The kernels
// compute a row's set once per tile, so that each score tests three integers and branches on
// nothing; the CPU model keeps mask_allows element by element (FusedTiles tests that both agree).
struct Visible {
  int lo = 0, hi = 0, skip = -1;
};
COMBINER_HD bool visible(const Visible& v, int c) {
  return c >= v.lo && c < v.hi && c != v.skip;
}
// visible() for c >= 0 where v.lo <= 0 (a query row's keys counted from its tile's first key or
// later, unpacked): two integers.
COMBINER_HD bool visible_in_prefix(const Visible& v, int c) {
  return c < v.hi && c != v.skip;
}
// The same set, counted from column `origin`: c is in it iff origin + c is in v.
COMBINER_HD Visible from(const Visible& v, int origin) {
  return {v.lo - origin, v.hi - origin, v.skip - origin};
}
// The keys j < count that query t sees.
COMBINER_HD Visible keys_seen(Mask mask, int t, int count) {
  Visible v;
  v.hi = mask == Mask::kCausal   ? (t + 1 < count ? t + 1 : count)
         : mask == Mask::kStrict ? (t < count ? t : count)
                                 : count;
  v.skip = mask == Mask::kOthers ? t : -1;
  return v;
}
// The queries t < count that see key j.
COMBINER_HD Visible queries_seeing(Mask mask, int j, int count) {
  Visible v;
  v.lo = mask == Mask::kCausal ? j : mask == Mask::kStrict ? j + 1 : 0;
  v.hi = count;
  v.skip = mask == Mask::kOthers ? j : v.lo - 1;
  return v;
}

// Keys of source A that queries 0..last of a segment with `count` keys can see (a prefix of them;
// kOthers: all, as query 0 sees keys 1.. and query 1 key 0).
COMBINER_HD int64_t direct_keys(Mask mask, int64_t count, int64_t last) {
  if (mask == Mask::kNone || mask == Mask::kOthers) return count;
  const int64_t seen = mask == Mask::kCausal ? last + 1 : last;
  return seen < count ? seen : count;
}

// The tile shortcuts. A group of queries t <= last (a warp's 16, a tile's MQ) may skip a key tile
// that starts at key j0 when none of them sees key j0 or any later one: only for the causal
// masks, where query t sees keys 0..t (or 0..t-1).
COMBINER_HD bool may_skip(Mask mask, int64_t last, int64_t j0) {
  return (mask == Mask::kCausal || mask == Mask::kStrict) && !mask_allows(mask, last, j0);
}
// The first query index (a multiple of MQ) whose tile can see a key at or after j0: under the
// causal masks no query before j0 does; under kNone and kOthers every query may.
COMBINER_HD int64_t first_query_tile(Mask mask, int64_t j0, int64_t MQ) {
  return mask == Mask::kCausal || mask == Mask::kStrict ? index_div(j0, MQ) * MQ : 0;
}

// Source B: its keys for segment g (by segment, j < summary_terms are all its keys; by prefix,
// every query of g sees them all), how many of them queries 0..last of g can see (a prefix),
// their rows in ks and u, its mask (by prefix: none) and whether query t sees key j.
COMBINER_HD int64_t summary_terms(const Pass& p, int64_t segment) {
  if (!p.summaries) return 0;
  if (p.by_segment) return valid_count(p.summary_key, segment);
  return segment < p.summary_count ? segment : p.summary_count;
}
COMBINER_HD int64_t summary_keys(const Pass& p, int64_t segment, int64_t last) {
  const int64_t terms = summary_terms(p, segment);
  return p.by_segment ? direct_keys(p.summary_mask, terms, last) : terms;
}
COMBINER_HD int64_t summary_key_row(const Pass& p, int64_t segment, int64_t j) {
  return p.by_segment ? row_of(p.summary_key, segment, j) : j;
}
COMBINER_HD int64_t summary_value_row(const Pass& p, int64_t segment, int64_t j) {
  return p.by_segment ? row_of(p.summary_value, segment, j) : j;
}
COMBINER_HD Mask summary_mask_of(const Pass& p) {
  return p.by_segment ? p.summary_mask : Mask::kNone;
}
COMBINER_HD bool summary_allows(const Pass& p, int64_t t, int64_t j) {
  return mask_allows(summary_mask_of(p), t, j);
}

COMBINER_HD int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// The same of indices (index_div): segments, rows and tiles of one head.
COMBINER_HD int64_t index_ceil_div(int64_t a, int64_t b) {
  return index_div(a + b - 1, b);
}

// Query tiles per segment, and the summary-gradient parts (runs of segments) per summary tile.
COMBINER_HD int64_t query_chunks(const Pass& p) {
  return ceil_div(p.query.seg_len, kQueryTile);
}
COMBINER_HD int64_t segments_per_part(const Pass& p) {
  const int64_t s = index_ceil_div(kSummaryPartRows, p.query.seg_len);
  return s > 0 ? s : 1;
}

// ---- tiles: which queries and keys each CTA holds ----

// Short segments share tiles. A pass whose segments hold at most half a query tile of queries
// packs `pack` consecutive segments (a *pack group*) into each query tile, segment
// group * pack + i's query t at tile row i * query.seg_len + t, and their keys into one key tile
// per source, key j at column i * seg_len + j (source A's seg_len, or source B's by segment): one
// CTA where there were `pack`, its tiles up to `pack` times fuller (vertical's columns at W 96:
// 32 queries and 31 or 32 keys each, two to a tile). A query sees its own segment's keys only.
// Summaries by prefix, which every segment shares, are not packed.
COMBINER_HD int64_t segment_pack(const Pass& p) {
  if ((p.summaries && !p.by_segment) || p.query.seg_len < 1) return 1;
  int64_t pack = 1;  // kQueryTile / seg_len, without a division (see index_div)
  while ((pack + 1) * p.query.seg_len <= kQueryTile) ++pack;
  const int64_t b_len = p.summaries ? p.summary_key.seg_len : 0;
  while (pack > 1 && (pack * p.key.seg_len > kKeyTile || pack * b_len > kKeyTile)) --pack;
  return pack;
}

// Query i of segment g, or key i of segment g, as a tile holds it (valid: it exists).
struct TileIndex {
  int64_t g = 0, i = 0;
  bool valid = false;
};

// The forward's and dq's CTAs (per head): a query tile each, one chunk of a segment or one pack
// group.
COMBINER_HD int64_t query_ctas(const Pass& p) {
  const int64_t pack = segment_pack(p);
  return pack > 1 ? index_ceil_div(p.query.segments, pack) : p.query.segments * query_chunks(p);
}
// Row r of query CTA `cta`'s tile.
COMBINER_HD TileIndex tile_query(const Pass& p, int64_t cta, int64_t r) {
  const int64_t pack = segment_pack(p), len = p.query.seg_len;
  TileIndex q;
  if (pack > 1) {
    if (r >= pack * len) return q;
    q.g = cta * pack + index_div(r, len);
    q.i = index_mod(r, len);
  } else {
    const int64_t chunks = query_chunks(p);
    q.g = index_div(cta, chunks);
    q.i = index_mod(cta, chunks) * kQueryTile + r;
  }
  q.valid = q.g < p.query.segments && q.i < valid_count(p.query, q.g);
  return q;
}
// Query f of pack group `group` (f < pack * query.seg_len), as the key-side walk numbers them.
COMBINER_HD TileIndex packed_query(const Pass& p, int64_t group, int64_t f) {
  const int64_t pack = segment_pack(p), len = p.query.seg_len;
  TileIndex q;
  if (f >= pack * len) return q;
  q.g = group * pack + index_div(f, len);
  q.i = index_mod(f, len);
  q.valid = q.g < p.query.segments && q.i < valid_count(p.query, q.g);
  return q;
}
// Column c of pack group `group`'s key tile of source A or (`b`) of source B by segment.
COMBINER_HD TileIndex packed_key(const Pass& p, bool b, int64_t group, int64_t c) {
  const Geometry& at = b ? p.summary_key : p.key;
  const int64_t pack = segment_pack(p), len = at.seg_len;
  TileIndex k;
  if (len < 1 || c >= pack * len) return k;
  k.g = group * pack + index_div(c, len);
  k.i = index_mod(c, len);
  k.valid = k.g < at.segments && k.i < (b ? summary_terms(p, k.g) : valid_count(p.key, k.g));
  return k;
}

// The key tiles query CTA `cta` walks: source A's (`direct`: an unpacked tile's up to the keys
// its last query sees), then source B's, `total` in all.
struct QueryTileKeys {
  int64_t direct = 0, total = 0;
};
COMBINER_HD QueryTileKeys query_tile_keys(const Pass& p, int64_t cta) {
  QueryTileKeys n;
  if (segment_pack(p) > 1) {
    n.direct = p.key.seg_len > 0 ? 1 : 0;
    n.total = n.direct + (p.summaries && p.summary_key.seg_len > 0 ? 1 : 0);
    return n;
  }
  const int64_t chunks = query_chunks(p), g = index_div(cta, chunks);
  const int64_t t0 = index_mod(cta, chunks) * kQueryTile;
  const int64_t q_count = valid_count(p.query, g);
  if (t0 >= q_count) return n;
  const int64_t last = (t0 + kQueryTile < q_count ? t0 + kQueryTile : q_count) - 1;
  n.direct = ceil_div(direct_keys(p.mask, valid_count(p.key, g), last), kKeyTile);
  n.total = n.direct + ceil_div(summary_keys(p, g, last), kKeyTile);
  return n;
}
// Column c of key tile `tile` of query CTA `cta` (source B's from tile `direct` on): an unpacked
// tile's key of segment cta / chunks, up to the keys its last query sees; a packed one's, of its
// group.
COMBINER_HD TileIndex
tile_key(const Pass& p, int64_t cta, int64_t tile, int64_t direct, int64_t c) {
  const bool b = tile >= direct;
  if (segment_pack(p) > 1) return packed_key(p, b, cta, c);
  const int64_t chunks = query_chunks(p), g = index_div(cta, chunks);
  const int64_t t0 = index_mod(cta, chunks) * kQueryTile;
  const int64_t q_count = valid_count(p.query, g);
  const int64_t last = (t0 + kQueryTile < q_count ? t0 + kQueryTile : q_count) - 1;
  TileIndex k;
  k.g = g;
  k.i = (b ? tile - direct : tile) * kKeyTile + c;
  k.valid = k.i < (b ? summary_keys(p, g, last) : valid_count(p.key, g));
  return k;
}
// Column c of dk/dv CTA `cta` of source A or (`b`) of source B by segment.
COMBINER_HD TileIndex dkv_key(const Pass& p, bool b, int64_t cta, int64_t c) {
  if (segment_pack(p) > 1) return packed_key(p, b, cta, c);
  const Geometry& at = b ? p.summary_key : p.key;
  const int64_t tiles = ceil_div(at.seg_len, kKeyTile);
  TileIndex k;
  k.g = index_div(cta, tiles);
  k.i = index_mod(cta, tiles) * kKeyTile + c;
  k.valid = k.i < (b ? summary_terms(p, k.g) : valid_count(p.key, k.g));
  return k;
}

// The keys a dk/dv CTA owns: a tile of source A's keys of one segment (or pack group), of source
// B's by segment, or of the summaries by prefix (read by the queries of every later segment).
enum class Keys : int { kSourceA, kSegmentSummaries, kPrefixSummaries };
// Column c of dk/dv CTA `cta` of `keys`: dkv_key's, or by prefix summary tile cta's.
COMBINER_HD TileIndex dkv_column(const Pass& p, Keys keys, int64_t cta, int64_t c) {
  if (keys != Keys::kPrefixSummaries) return dkv_key(p, keys != Keys::kSourceA, cta, c);
  TileIndex k;
  k.i = cta * kKeyTile + c;
  k.valid = k.i < p.summary_count;
  return k;
}
// The queries the walk of a dk/dv CTA visits, whose first column is `first`: flat indices
// begin <= f < end (none when end <= begin). By prefix, part `part`'s segments after the tile's
// first summary, f = g * seg_len + t; packed, the group's f < pack * seg_len (packed_query); else
// the key's own segment's, from the first query tile that can see it.
struct QueryRange {
  int64_t begin = 0, end = 0;
};
COMBINER_HD QueryRange dkv_queries(const Pass& p, Keys keys, const TileIndex& first, int64_t part) {
  QueryRange r;
  if (keys == Keys::kPrefixSummaries) {
    const int64_t per = segments_per_part(p), lo = part * per;
    const int64_t g_lo = lo > first.i + 1 ? lo : first.i + 1;
    const int64_t g_hi = (part + 1) * per < p.query.segments ? (part + 1) * per : p.query.segments;
    r.begin = g_lo * p.query.seg_len;
    r.end = g_hi * p.query.seg_len;
  } else if (segment_pack(p) > 1) {
    r.end = segment_pack(p) * p.query.seg_len;
  } else {
    const Mask mask = keys == Keys::kSourceA ? p.mask : p.summary_mask;
    r.begin = first_query_tile(mask, first.i, backward_query_tile(p.dim));
    r.end = valid_count(p.query, first.g);
  }
  return r;
}
// Query f of that walk (`first` as above, `cta` its CTA).
COMBINER_HD TileIndex
dkv_query(const Pass& p, Keys keys, int64_t cta, const TileIndex& first, int64_t f) {
  if (keys != Keys::kPrefixSummaries && segment_pack(p) > 1) return packed_query(p, cta, f);
  const bool prefix = keys == Keys::kPrefixSummaries;
  TileIndex q;
  q.g = prefix ? index_div(f, p.query.seg_len) : first.g;
  q.i = prefix ? index_mod(f, p.query.seg_len) : f;
  q.valid = q.i < valid_count(p.query, q.g);
  return q;
}

}  // namespace combiner::attention::fused
