// What a fused launch is told: the descriptors of a pass (its queries' and sources' rows, its
// masks and summaries), of a forward, a delta, a backward, a max pool and a pair of passes. The
// rules for reading them are kernel_index.h's (rows and tiles), kernel_scan.h's (the pools'
// lines) and kernel_plan.h's (which launches a call makes); kernel.h gathers them with the
// entry points.
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
  // A local pass that makes its cumulative max pools on chip (pools_on_chip, kernel_plan.h): its
  // query t of segment g is the running max of q's rows row_of(pooled_query, g, t') for t' <= t
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
  // pooled queries, by its local pass at blocks of more than 32). Its backward runs in the
  // backward's CTAs (Backward::query_pool). A pair carries none (pairable).
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
  // The backward of the forward's query_pool, in the same CTAs (segments 0: none; where
  // query_pool_backward_fits): the CTA of segment g's one query, once it has stored that query's
  // gradient (dq: dy's row g, the whole of it, as the pool kernel would read it), reads the
  // segment's rows of x again and adds dy[g] into dx at each column's arg-max, as the segment max
  // kernel's backward does (accumulate; the pool launch goes). dx is the call's gradient of the q
  // it pooled, in the pass dtype, whose rows of these segments no other CTA of the launch touches
  // (the pass writes its own queries' gradient, dy, not dx). A pair carries none.
  SegmentMax query_pool;
};

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

}  // namespace combiner::attention::fused
