// The fused Combiner attention core, without torch: for every query of a segment (a block, a row
// or a column), one softmax over the segment's own keys (masked) and, optionally, one summary per
// earlier segment, then the weighted sum of their values; the forward saves one log-sum-exp per
// query and the backward recomputes the weights from it, as FlashAttention does. No score tensor
// leaves the tile. Two implementations read these descriptors: a CPU model (plain loops over the
// same tiles with the same formulas; tests and kernel-check) and the CUDA kernels (CUDA builds).
// The index rules below are shared, word for word, by both (host and device functions).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define COMBINER_HD __host__ __device__ __forceinline__
#else
#define COMBINER_HD inline
#endif

namespace combiner::attention::fused {

enum class Dtype : int { kFloat32, kBFloat16, kFloat64 };  // kFloat64: CPU model only

// Which keys of its own segment query t sees: all, j <= t, j < t, or all but j = t.
enum class Mask : int { kNone, kCausal, kStrict, kOthers };

// Tiles: queries in tiles of kQueryTile rows (4 warps x 16), keys in tiles of kKeyTile. The
// key-side backward walks queries in tiles of backward_query_tile(D) (smaller for D = 128, so
// its two [16 x D] accumulators and two [16 x tile] score blocks stay in registers).
constexpr int kQueryTile = 64;
constexpr int kKeyTile = 64;
COMBINER_HD constexpr int backward_query_tile(int64_t dim) {
  return dim > 64 ? 32 : 64;
}
// Summary gradients: each CTA walks the queries of at most this many rows' worth of segments.
constexpr int64_t kSummaryPartRows = 1024;

// Index t of segment g is row first + g * seg_stride + t * row_stride of its tensor; it exists
// iff t < seg_len, that row < limit and the segment's first row (t = 0) is not below 0. (A block
// of s: {s, 1}; a column of W-long rows: {1, W}; the rows after the first: first = W; a row read
// right to left: row_stride -1, first = W - 1, which exists whole or not at all; a source one
// segment behind its queries, segment g reading the rows of g - 1: first = -seg_stride.)
struct Geometry {
  int64_t segments = 0;
  int64_t seg_len = 0;
  int64_t seg_stride = 0;
  int64_t row_stride = 1;
  int64_t limit = 0;
  int64_t first = 0;
};

// A [B, H, rows, width] tensor whose last axis is contiguous; strides in elements.
struct Operand {
  const void* data = nullptr;
  int64_t batch = 0, head = 0, row = 0;
};

// "Acc" below is the accumulation type: double for kFloat64, float otherwise.
// A gradient output: [B, H, rows, width], row r of (b, h) at element b * stride[0] + h * stride[1]
// + r * stride[2], the last axis contiguous (a part of a packed [B, L, 3, H, D] gradient of a
// q, k, v projection, say; the Acc buffers are contiguous). kStore writes the pass dtype (plus
// `addend`, a tensor of the same layout in Acc, or in the pass dtype when `addend_in_storage`:
// then it may be `data` itself, a pass adding its part in place, which is safe where the pass
// writes each row once); kStoreAcc writes Acc; kAtomic adds into Acc data (atomically on the
// GPU, where CTAs share rows).
// `segment_rows`: source A's gradient of segment g's row r goes to row r + g * segment_rows. A
// pass whose segments all read the same key rows (seg_stride 0: rowmajor's columns over the row
// summaries) writes one slab per segment, summed afterwards, instead of W CTAs adding into the
// same rows.
struct GradOut {
  enum Kind : int { kNone, kStore, kStoreAcc, kAtomic };
  void* data = nullptr;
  Kind kind = kNone;
  int64_t stride[3] = {0, 0, 0};
  const void* addend = nullptr;
  int64_t segment_rows = 0;
  bool addend_in_storage = false;
};

// One pass: queries of `query`; source A = keys of `key` (rows of k) with values at the same
// index of `value` (rows of v), same segment as the query, masked by `mask`; source B (when
// `summaries`), in the same softmax, rows of ks (keys) and u (values):
//  - by prefix (combiner-fixed's summaries): rows r < min(g, summary_count) for every query of
//    segment g, unmasked;
//  - `by_segment` (a second source like A: vertical's spans in its row pass, horizontal's prefix
//    spans in its column pass): key j of segment g at row_of(summary_key, g, j) of ks, its value
//    at row_of(summary_value, g, j) of u, masked by summary_mask.
// D = Dv = dim. Scores are scale * q . k.
struct Pass {
  int64_t batch = 0, heads = 0, dim = 0;
  double scale = 1;
  Dtype dtype = Dtype::kFloat32;
  Geometry query, key, value;
  Mask mask = Mask::kCausal;
  bool summaries = false;
  int64_t summary_count = 0;  // by prefix
  bool by_segment = false;
  Geometry summary_key, summary_value;  // by segment
  Mask summary_mask = Mask::kNone;      // by segment
  Operand q, k, v, ks, u;
  // A local pass that makes its cumulative max pools on chip (pools_on_chip below): its query t
  // of segment g is the running max of q's rows row_of(pooled_query, g, t') for t' <= t
  // (RunningMax's rule, element by element), made in the CTA's query tile from the rows it
  // loads (carried from the segment's rows before the tile); `query` says where that query's o,
  // lse and d_o rows are (qs's rows, where the pools wrote it). The forward also writes its keys'
  // running max, key j's at row row_of(pooled_keys, g, j) of ks (Forward::pooled_keys). No pool
  // launch, no qs in memory; the backward pools its query tiles so too.
  bool pooled = false;
  Geometry pooled_query, pooled_keys;
};

// delta[b, h, r] = sum_d d_o[b, h, r, d] * o[b, h, r, d] for r < rows (Acc, contiguous). Where o
// holds the mean of the call's output and another call's (Forward::mean_with), `other_delta` is
// that call's delta (Acc, [B, H, rows] contiguous) and the call's own is made instead:
// 2 d_o . o - other_delta (own_delta).
struct Delta {
  int64_t batch = 0, heads = 0, rows = 0, dim = 0;
  Dtype dtype = Dtype::kFloat32;
  Operand o, d_o;
  void* delta = nullptr;
  const void* other_delta = nullptr;
};

// The max over each whole segment of x (the summaries of combiner-fixed's blocks and of
// rowmajor's rows, plain max pools): x [B, H, rows, D] (element strides `stride`, D contiguous),
// y [B, H, segments, D] contiguous, y[g] = max over t < len of x[g * len + t]; ties go to the
// first, NaN as torch::max (the first NaN). Backward: dx [B, H, rows, D] (element strides
// `dx_stride`, D contiguous), every row written: dy[g] at segment g's arg-max, zero elsewhere, rows
// past segments * len included (no zero-filled gradient and copy into a slice of it, as the pool of
// a narrowed view needs). With `accumulate`, dy[g] is added at the arg-max and nothing else is
// written. With `dy_acc`, dy is in the accumulation type (float; double for float64), as a fused
// call's float32 summary gradient is summed: read as it is, with no cast to x's dtype first (and
// so rounded once, where it is added). With `dy_slabs` > 1, dy is that many slabs, [B, H,
// dy_slabs, segments, D] contiguous, and dy[g] is their sum (segment_max_dy_at, summed in slab
// order): the slabs a pass whose segments share their key rows writes (GradOut::segment_rows),
// summed where they are read, with no sum launch between.
struct SegmentMax {
  int64_t batch = 0, heads = 0, rows = 0, dim = 0, segments = 0, len = 1;
  int64_t stride[3] = {0, 0, 0};     // x's batch, head and row strides
  int64_t dx_stride[3] = {0, 0, 0};  // dx's
  Dtype dtype = Dtype::kFloat32;
  const void* x = nullptr;
  void* y = nullptr;         // forward
  const void* dy = nullptr;  // backward
  void* dx = nullptr;        // backward
  bool accumulate = false;   // backward: dx[arg-max] += dy, other rows untouched
  bool dy_acc = false;       // backward: dy in Acc, not x's dtype
  int64_t dy_slabs = 1;      // backward: dy is the sum of this many slabs
};
// Forward: o [B, H, query.limit, D] (pass dtype; row r of (b, h) at element
// b * o_stride[0] + h * o_stride[1] + r * o_stride[2], the last axis contiguous: [B, L, H, D] in
// memory, say, which the output projection reads as [B, L, H x D] with no copy) and lse
// [B, H, query.limit] (Acc, natural log; -inf for a query with no term, contiguous). With `merge`,
// o and lse already hold another pass's result for the same queries: the two are combined by
// log-sum-exp (rows where this pass has no term keep theirs).
struct Forward {
  Pass pass;
  void* o = nullptr;
  int64_t o_stride[3] = {0, 0, 0};
  void* lse = nullptr;
  bool merge = false;
  // With mean_with: the pass writes every row of o last (nothing merges into it after), and
  // stores there the mean of its result and mean_with's row (another call's o over the same
  // queries, laid out as o: o_stride), (o + mean_with) / 2 rounded once; lse stays its own (a
  // merging pass's rows without terms take the mean of what they hold). combiner-mixture's
  // average, in its second call's last pass: no average launch, no tensor of that call's own o
  // (its backward makes its delta from the mean: Delta::other_delta).
  const void* mean_with = nullptr;
  // A pooled pass (Pass::pooled): key j of segment g's running max down its segment (keys
  // 0..j) at row row_of(pass.pooled_keys, g, j) of ks [B, H, rows, D] (element strides, the last
  // axis contiguous): the slot the later passes read as their summaries' keys.
  void* pooled_keys = nullptr;
  int64_t pooled_keys_stride[3] = {0, 0, 0};
  // A delta made in the same launch (null delta.delta: none), by CTAs of its own after the
  // pass's, as the delta kernel's CTAs make it (the same rows, pieces and sums): a forward that
  // runs in the backward before any pass reads delta (a local pass remade there) takes the
  // delta launch's work, and that launch goes. Its batch and heads are the pass's, its dtype and
  // dim too (one grid row per (b, h)); a pair carries none (pairable).
  Delta delta;
  // A plain max pool of the pass's keys made in its CTAs (key_pool.segments 0: none; where
  // key_pool_fits): segment g's max over its keys, as the segment max kernel writes it (x the
  // pass's k; y contiguous [B, H, segments, D]), by segment g's first query tile's CTA: from
  // the key tile it loads, where the segment is one (no pool launch and no read of k for it:
  // rowmajor's row maxes and fixed's block maxes, by their local pass at segments of at most
  // 64), else from k's rows read again after its walk, while L2 holds them (no pool launch). A
  // pair's first carries none (pairable).
  SegmentMax key_pool;
  // A plain max pool of q made by the pass's CTAs as their one query each (query_pool.segments
  // 0: none; where query_pool_fits): segment g's CTA loads x's rows g * len + t into its query
  // tile, takes their max (the segment max kernel's value) as its query, and writes it to y's
  // row g, which is the pass's own query row (pass.q is y): no pool launch (combiner-fixed's
  // pooled queries, by its local pass at blocks of at most 64). Its backward is the pool
  // kernel's, reading y's gradient. A pair carries none (pairable).
  SegmentMax query_pool;
};

// Backward of one pass, given the final lse and delta of its queries (contiguous
// [B, H, query.limit]) and d_o (rows of the query tensor). dk/dv are source A's gradients,
// dks/du source B's. dq may be d_o itself (stored over it, no addend): every read of d_o (the
// dk/dv walks, then each query tile's own rows, loaded before its dq is written) comes first.
struct Backward {
  Pass pass;
  Operand d_o;
  // The pass's gradients are those of grad_scale x d_o: every value it writes (dq, dk, dv, dks,
  // du, and u's delta from du as stored) is multiplied by grad_scale first, and delta and
  // made_delta are d_o's own, as every pass of the call reads them. With a power of two (each of
  // the mixture's two calls takes half the gradient of their mean) the bits are those of d_o
  // scaled first, with no scaled copy of d_o.
  double grad_scale = 1;
  const void* lse = nullptr;
  const void* delta = nullptr;
  GradOut dq, dk, dv, dks, du;
  // A pooled pass (Pass::pooled) that also runs its pools' backward, in its epilogue (kind
  // kStore; kNone: not here). Its queries' gradient (the pooled queries', rounded to the pass
  // dtype as dq would store it; dq itself is not written) goes through the running max's
  // backward into q's gradient `pools_dq` (at q's rows, pass.pooled_query), and `d_pooled_keys`
  // (the keys' running max's gradient, ks's, pass dtype, at pass.pooled_keys' rows) into dk,
  // after dk's own part is written: RunningMax's backward with `accumulate`, line by line down
  // each segment.
  GradOut pools_dq;
  Operand d_pooled_keys;
  // Where this pass is the one writer of u's gradient (u its source B's values by segment, or
  // `summary_delta_of_a`, source A's; that gradient kStore with no addend and no slabs: every row
  // of u it reads has its whole gradient here), the Delta of u's rows that the local passes,
  // whose d_o is that gradient, need; made in the epilogue that stores it (null: not here):
  // summary_delta[b, h, r] = sum_d du[b, h, r, d] * u[b, h, r, d] over du as stored (Acc,
  // contiguous [B, H, summary_delta_rows]), for each row r of u the pass reads, in the delta
  // kernel's order. No delta launch, and u and du are not read again for it.
  void* summary_delta = nullptr;
  int64_t summary_delta_rows = 0;
  bool summary_delta_of_a = false;
  // Where the pass's queries are every row of the call's output o ([B, H, query.limit, D], the
  // rows of d_o), each once, and its walk can make delta (makes_delta_built): it makes delta
  // itself, each query tile's from its d_o rows and o's as they land in its source A walk (the
  // delta kernel's value, in its order), and writes it to made_delta for the passes after it
  // (null: delta is read as given). `delta` is then made_delta; no delta launch. One CTA per
  // segment (segment_backward) writes each of its rows and reads them back in its source B walk,
  // after the CTA's barrier; otherwise each source A walk CTA makes the deltas of the query tiles
  // it walks, the one of each segment's first key tile writes them, and the launches after the
  // walk (the summaries' walk by prefix, dq) read them (walk_makes_delta).
  void* made_delta = nullptr;
  Operand o;
  const void* other_delta = nullptr;  // o the mean of two calls' outputs: Delta::other_delta
  // Where interleaved_backward allows it, the dk/dv walk and dq in one launch (false: in two,
  // as the tests compare them).
  bool interleave = true;
  // The backward of the forward's key_pool, in the same CTAs (segments 0: none; where
  // key_pool_fits, and `accumulate`): segment g's CTA adds dy[g] into dx at the arg-max of its
  // key tile, or, in a dk/dv walk, the CTA of the key tile holding the segment's arg-max (each
  // reads the segment's rows of k again to find it), after dk's own part is written, as the
  // segment max kernel's backward does (the pool launch goes). dx is then the pass's dk, in the
  // pass dtype, each row stored by its key tile's CTA alone. A pair's first carries none.
  SegmentMax key_pool;
};

// ---- index rules (CPU model and CUDA kernels) ----

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

// The inclusive running max along one axis (the cumulative max pools of the axial variants'
// spans: down each column for vertical, along each row both ways for horizontal), in one launch
// where LibTorch's cummax, flips, scatter-add and copies take dozens. The tensors are viewed as
// lines [outer0, outer1, outer2, inner] of n steps, each through its own ScanLayout: x as it is
// (a view of the qkv projection, say), y and dy, and dx, so that y and dx can be written in the
// caller's layout and need no copy. `reverse` runs t from n - 1 down. Ties and NaN as
// torch::cummax: a value >= the running max, or NaN, becomes it. Backward: dx[t] = the sum of dy
// over the steps whose max is x[t] (Acc sums), found again by the same scan: no indices are kept.
// With `accumulate`, the backward adds that sum into dx (each element is read and written by the
// one thread that owns its line) and leaves the other elements as they are: the fused call adds a
// pool's gradient into k's or q's in place.
struct ScanLayout {  // line (a, b, c, i)'s step t at a*s[0] + b*s[1] + c*s[2] + t*step + i
  int64_t outer_stride[3] = {0, 0, 0};
  int64_t step_stride = 0;
};
struct RunningMax {
  int64_t outer[3] = {1, 1, 1};
  int64_t n = 0, inner = 1;
  ScanLayout x_at, y_at, dx_at;  // x; y and dy; dx (each line's inner elements contiguous)
  bool reverse = false;
  Dtype dtype = Dtype::kFloat32;
  const void* x = nullptr;
  void* y = nullptr;         // forward
  const void* dy = nullptr;  // backward
  void* dx = nullptr;        // backward
  bool accumulate = false;   // backward: dx += (else every element of the lines is stored)
};

COMBINER_HD int64_t running_max_lines(const RunningMax& r) {
  return r.outer[0] * r.outer[1] * r.outer[2] * r.inner;
}
// Where line `line` starts in a tensor of layout `at`; its step t is at + t * at.step_stride.
COMBINER_HD int64_t running_max_start(const RunningMax& r, const ScanLayout& at, int64_t line) {
  const int64_t i = line % r.inner;
  int64_t o = line / r.inner;
  const int64_t c = o % r.outer[2];
  o /= r.outer[2];
  const int64_t b = o % r.outer[1], a = o / r.outer[1];
  return a * at.outer_stride[0] + b * at.outer_stride[1] + c * at.outer_stride[2] + i;
}
COMBINER_HD int64_t running_max_step(const RunningMax& r, int64_t k) {
  return r.reverse ? r.n - 1 - k : k;
}
// Whether x[t] = v becomes the running max `best` at the scan's k-th step.
template <typename T>
COMBINER_HD bool running_max_takes(int64_t k, T v, T best) {
  return k == 0 || v != v || v >= best;  // v != v: NaN
}

// Lines of the forward (b, h, g < segments, d) and of the backward (g < ceil(rows / len)).
COMBINER_HD int64_t segment_max_lines(const SegmentMax& m, bool backward) {
  const int64_t groups = backward ? (m.rows + m.len - 1) / m.len : m.segments;
  return m.batch * m.heads * groups * m.dim;
}
// The element of dy's slab `slab` for line (b * heads + h, g, d): dy[g] is the sum over the
// slabs, slab 0 first, in every implementation (the same float rounding).
COMBINER_HD int64_t
segment_max_dy_at(const SegmentMax& m, int64_t bh, int64_t slab, int64_t g, int64_t d) {
  return ((bh * m.dy_slabs + slab) * m.segments + g) * m.dim + d;
}
template <typename T>
COMBINER_HD bool segment_max_takes(int64_t t, T v, T best) {
  return t == 0 || (v != v && best == best) || v > best;  // v != v: NaN
}

// Several scans of one kind and dtype in one launch (the pools of a fused call: ks's and qs's,
// prefixes and suffixes): part i's lines follow part i - 1's. The parts of a backward write
// disjoint elements of dx (a thread owns its line's; two parts adding into one element would
// race).
constexpr int kMaxScanParts = 4;
template <typename Scan>
struct ScanParts {
  Scan part[kMaxScanParts];
  int count = 0;
};
using RunningMaxes = ScanParts<RunningMax>;
using SegmentMaxes = ScanParts<SegmentMax>;
// One scan as a launch's parts (a pass's key pool as the segment max kernel would run it).
template <typename Scan>
COMBINER_HD ScanParts<Scan> one_part(const Scan& scan) {
  ScanParts<Scan> parts;
  parts.part[0] = scan;
  parts.count = 1;
  return parts;
}

COMBINER_HD int64_t scan_lines(const RunningMax& r, bool) {
  return running_max_lines(r);
}
COMBINER_HD int64_t scan_lines(const SegmentMax& m, bool backward) {
  return segment_max_lines(m, backward);
}
template <typename Scan>
COMBINER_HD int64_t scan_lines(const ScanParts<Scan>& s, bool backward) {
  int64_t lines = 0;
  for (int i = 0; i < s.count; ++i) lines += scan_lines(s.part[i], backward);
  return lines;
}
// The part that line `line` of the launch belongs to; `line` becomes its line in that part.
template <typename Scan>
COMBINER_HD int scan_part(const ScanParts<Scan>& s, bool backward, int64_t& line) {
  int i = 0;
  while (i + 1 < s.count && line >= scan_lines(s.part[i], backward))
    line -= scan_lines(s.part[i++], backward);
  return i;
}

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

// Two passes in one launch, forward or backward: CTA x runs `first`'s CTA x, then `second`'s
// (where it has one), so that rows both read cross from DRAM once, and rows the second adds to
// are the ones the first has just written. Vertical's column pass and its local pass at L 3072:
// the same columns, q, k and v rows, the local pass's rows the column's first spans.
struct ForwardPair {
  Forward first, second;
};
struct BackwardPair {
  Backward first, second;
};
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
// (walks_pairable), neither making a delta, the first no key pool, every gradient row the second
// writes in CTA x one the first writes in CTA x, in segments that share no row: no CTA touches a
// row another CTA writes. (That the second reads nothing the first writes but its addends is the
// caller's to keep.)
COMBINER_HD bool pairable(const Backward& a, const Backward& b) {
  const Pass &p = a.pass, &r = b.pass;
  const bool segments = segment_backward(p) && segment_backward(r);
  if (!(segments || walks_pairable(a, b)) || !same_ctas(p, r)) return false;
  if (a.made_delta || b.made_delta || a.summary_delta || b.summary_delta) return false;
  if (a.key_pool.segments != 0) return false;
  const Geometry &aq = query_gradient_rows(a), &bq = query_gradient_rows(b);
  return disjoint(aq) && disjoint(p.key) && disjoint(p.value) && within_segments(bq, aq);
}
// A pair's launches: one, or two for two walks (dk/dv, then dq).
COMBINER_HD int64_t backward_launches(const BackwardPair& b) {
  return segment_backward(b.first.pass) ? 1 : 2;
}

// ---- the CPU model (fused/kernel_cpu.cpp): float32, float64, bfloat16 (float32 arithmetic) ----
void forward_cpu(const Forward& f);
void forward_pair_cpu(const ForwardPair& f);  // pairable(first, second)
void delta_cpu(const Delta& d);
void backward_cpu(const Backward& b);
void backward_pair_cpu(const BackwardPair& b);  // pairable(first, second)
void running_max_forward_cpu(const RunningMaxes& r);
void running_max_backward_cpu(const RunningMaxes& r);
void segment_max_forward_cpu(const SegmentMaxes& m);
void segment_max_backward_cpu(const SegmentMaxes& m);

// ---- the CUDA kernels (kernel_*.cu; CUDA builds only): float32 and bfloat16, D = Dv in
// {32, 64, 128}, every row 16-byte aligned. `stream` is a cudaStream_t. Errors throw
// std::runtime_error naming the launch.
bool cuda_supports(Dtype dtype, int64_t dim);
void forward_cuda(const Forward& f, void* stream);
void forward_pair_cuda(const ForwardPair& f, void* stream);
void delta_cuda(const Delta& d, void* stream);
void backward_cuda(const Backward& b, void* stream);
void backward_pair_cuda(const BackwardPair& b, void* stream);
// The scans in float32 or bfloat16, any inner length (one thread per line), all parts in one
// launch.
void running_max_forward_cuda(const RunningMaxes& r, void* stream);
void running_max_backward_cuda(const RunningMaxes& r, void* stream);
void segment_max_forward_cuda(const SegmentMaxes& m, void* stream);
void segment_max_backward_cuda(const SegmentMaxes& m, void* stream);

}  // namespace combiner::attention::fused
