#include "attention/fused/traffic.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace combiner::attention::fused {

namespace {

int64_t element_bytes(Dtype dtype) {
  return dtype == Dtype::kBFloat16 ? 2 : dtype == Dtype::kFloat32 ? 4 : 8;
}
int64_t acc_bytes(Dtype dtype) {
  return dtype == Dtype::kFloat64 ? 8 : 4;
}

// The loads and stores of one (batch, head): every one counted, and each distinct address once
// per direction. An address is base + element * element size (the pointers are never read).
// kTile: a load into a CTA's tile (cp.async), else a plain load (epilogues, scans, delta).
enum class Load { kTile, kPlain };
class Ledger {
 public:
  void read(const void* base, int64_t element, int64_t size, int64_t count, Load how) {
    note(reads_, base, element, size, count);
    t_.read += double(size * count);
    if (how == Load::kTile) t_.loaded += double(size * count);
  }
  void write(const void* base, int64_t element, int64_t size, int64_t count) {
    note(writes_, base, element, size, count);
    t_.written += double(size * count);
  }
  Traffic total(double heads) const {
    Traffic t = t_;
    for (const auto* seen : {&reads_, &writes_})
      for (const auto& [address, bytes] : *seen) t.unique += double(bytes);
    for (double* x : {&t.loaded, &t.read, &t.written, &t.unique}) *x *= heads;
    return t;
  }

 private:
  using Seen = std::unordered_map<uintptr_t, int64_t>;  // address -> bytes from it
  static void note(Seen& seen, const void* base, int64_t element, int64_t size, int64_t count) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(base) + uintptr_t(element * size);
    int64_t& bytes = seen[address];
    bytes = std::max(bytes, size * count);
  }
  Seen reads_, writes_;
  Traffic t_;
};

// Head (0, 0)'s row `row` of x: D elements of `size` bytes.
void read_row(Ledger& l, const Operand& x, int64_t row, int64_t D, int64_t size, Load how) {
  l.read(x.data, row * x.row, size, D, how);
}

// One gradient row as write_grad (kernel_cpu.cpp) and the kernels' epilogue write it.
void write_grad(Ledger& l, const GradOut& out, int64_t row, const Pass& p) {
  const int64_t D = p.dim, es = element_bytes(p.dtype), acc = acc_bytes(p.dtype);
  const int64_t at = grad_at(out, 0, 0, row);
  switch (out.kind) {
    case GradOut::kNone:
      return;
    case GradOut::kStore:
      if (out.addend) l.read(out.addend, at, out.addend_in_storage ? es : acc, D, Load::kPlain);
      l.write(out.data, at, es, D);
      return;
    case GradOut::kStoreAcc:
      l.write(out.data, at, acc, D);
      return;
    case GradOut::kAtomic:  // a read-modify-write
      l.read(out.data, at, acc, D, Load::kPlain);
      l.write(out.data, at, acc, D);
      return;
  }
}

int64_t key_row(const Pass& p, bool summary, const TileIndex& key) {
  return summary ? summary_key_row(p, key.g, key.i) : row_of(p.key, key.g, key.i);
}
int64_t value_row(const Pass& p, bool summary, const TileIndex& key) {
  return summary ? summary_value_row(p, key.g, key.i) : row_of(p.value, key.g, key.i);
}
void read_key(Ledger& l, const Pass& p, bool summary, const TileIndex& key) {
  const int64_t es = element_bytes(p.dtype);
  read_row(l, summary ? p.ks : p.k, key_row(p, summary, key), p.dim, es, Load::kTile);
  read_row(l, summary ? p.u : p.v, value_row(p, summary, key), p.dim, es, Load::kTile);
}

// The valid query rows of query CTA `cta` (tile_query), in tile order.
std::vector<int64_t> query_rows(const Pass& p, int64_t cta) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const TileIndex q = tile_query(p, cta, r);
    if (q.valid) rows.push_back(row_of(p.query, q.g, q.i));
  }
  return rows;
}

// The key tiles a query CTA walks (forward and dq kernels): source A's, then source B's.
void read_key_tiles(Ledger& l, const Pass& p, int64_t cta) {
  const QueryTileKeys n = query_tile_keys(p, cta);
  for (int64_t tile = 0; tile < n.total; ++tile)
    for (int64_t c = 0; c < kKeyTile; ++c) {
      const TileIndex key = tile_key(p, cta, tile, n.direct, c);
      if (key.valid) read_key(l, p, tile >= n.direct, key);
    }
}

// Query q's row of q (query_source_row) and its row of d_o (into the CTA's tiles), lse and delta
// (the dk/dv walk copies them into its tiles too; the dq kernel's threads load their rows' own).
// (A pass making delta reads it back in its second source's walk, from the rows it wrote.)
void read_query(
    Ledger& l, const Backward& bw, const TileIndex& q, Load scalars, bool made_here = false) {
  const Pass& p = bw.pass;
  const int64_t es = element_bytes(p.dtype), acc = acc_bytes(p.dtype);
  const int64_t row = row_of(p.query, q.g, q.i);
  read_row(l, p.q, query_source_row(p, q.g, q.i), p.dim, es, Load::kTile);
  read_row(l, bw.d_o, row, p.dim, es, Load::kTile);
  l.read(bw.lse, row, acc, 1, scalars);
  if (!made_here) l.read(bw.delta, row, acc, 1, scalars);
}

// A pooled pass's rows of segment g before index `count`, which its running maxes carry from,
// read again as plain loads: q's and, `keys`, k's. (Packed tiles start every segment.)
void read_carried(Ledger& l, const Pass& p, int64_t g, int64_t count, bool keys) {
  if (!p.pooled || segment_pack(p) != 1) return;
  const int64_t es = element_bytes(p.dtype);
  for (int64_t t = 0; t < count; ++t) {
    read_row(l, p.q, query_source_row(p, g, t), p.dim, es, Load::kPlain);
    if (keys) read_row(l, p.k, row_of(p.key, g, t), p.dim, es, Load::kPlain);
  }
}

// The dk/dv walk of one CTA (backward_dkv_tile in kernel_cpu.cpp, dkv_tile in
// kernel_backward.cu): its keys once, the query tiles that can see them, its keys' gradients.
void dkv_walk(Ledger& l, const Backward& bw, Keys keys, int64_t cta, int64_t part) {
  const Pass& p = bw.pass;
  const bool a = keys == Keys::kSourceA;
  std::vector<TileIndex> tile;
  for (int64_t c = 0; c < kKeyTile; ++c) tile.push_back(dkv_column(p, keys, cta, c));
  if (std::none_of(tile.begin(), tile.end(), [](const TileIndex& k) { return k.valid; })) return;
  const QueryRange f = dkv_queries(p, keys, tile[0], part);
  if (keys == Keys::kPrefixSummaries && f.end <= f.begin) return;  // loads and adds nothing
  for (const auto& key : tile)
    if (key.valid) read_key(l, p, !a, key);
  if (a) read_carried(l, p, tile[0].g, f.begin, false);  // the queries before its first
  // Making o's delta in the walk alone (walk_makes_delta): each CTA reads o's rows of its
  // queries, and the segment's first key tile's writes their delta.
  const bool walk_delta = a && bw.made_delta && !segment_backward(p);
  for (int64_t i = f.begin; i < f.end; ++i) {
    const TileIndex q = dkv_query(p, keys, cta, tile[0], i);
    if (!q.valid) continue;
    read_query(l, bw, q, Load::kTile, a && bw.made_delta);
    if (walk_delta) {
      const int64_t row = row_of(p.query, q.g, q.i);
      read_row(l, bw.o, row, p.dim, element_bytes(p.dtype), Load::kPlain);
      if (bw.other_delta) l.read(bw.other_delta, row, acc_bytes(p.dtype), 1, Load::kPlain);
      if (tile[0].i == 0) l.write(bw.made_delta, row, acc_bytes(p.dtype), 1);
    }
  }
  for (const auto& key : tile) {
    if (!key.valid) continue;
    const int64_t k = key_row(p, !a, key), v = value_row(p, !a, key);
    if (a) {
      write_grad(l, bw.dk, k + key.g * bw.dk.segment_rows, p);
      write_grad(l, bw.dv, v + key.g * bw.dv.segment_rows, p);
    } else {
      write_grad(l, bw.dks, k, p);
      write_grad(l, bw.du, v, p);
    }
    if (bw.summary_delta && bw.summary_delta_of_a == a && keys != Keys::kPrefixSummaries)
      l.write(bw.summary_delta, v, acc_bytes(p.dtype), 1);  // u's delta
  }
}

double heads_of(int64_t batch, int64_t heads) {
  return double(batch) * double(heads);
}

}  // namespace

namespace {

// The delta kernel's CTAs, or a forward's that make its delta: every row of o and d_o, read
// once (and the other call's delta, where o is a mean), and its delta.
void delta_traffic(Ledger& l, const Delta& d) {
  const int64_t es = element_bytes(d.dtype), acc = acc_bytes(d.dtype);
  for (int64_t r = 0; r < d.rows; ++r) {
    read_row(l, d.o, r, d.dim, es, Load::kPlain);
    read_row(l, d.d_o, r, d.dim, es, Load::kPlain);
    if (d.other_delta) l.read(d.other_delta, r, acc, 1, Load::kPlain);
    l.write(d.delta, r, acc, 1);
  }
}

// One query CTA of a forward: its queries (a pooled pass's from pooled_query's rows; made by a
// query pool from its segment's rows of x, written to y), its key tiles, a pooled pass's keys'
// running max, and its epilogue.
void forward_cta(Ledger& l, const Forward& f, int64_t cta) {
  const Pass& p = f.pass;
  const int64_t es = element_bytes(p.dtype), acc = acc_bytes(p.dtype);
  const auto rows = query_rows(p, cta);
  if (rows.empty()) return;
  const SegmentMax& made = f.query_pool;
  if (made.segments > 0) {
    const Operand x = {made.x, made.stride[0], made.stride[1], made.stride[2]};
    for (int64_t t = 0; t < made.len; ++t)  // the query tile's rows, then x's read as they come
      read_row(l, x, cta * made.len + t, p.dim, es, t < kQueryTile ? Load::kTile : Load::kPlain);
    l.write(made.y, cta * made.dim, es, made.dim);
  } else {
    for (int64_t r = 0; r < kQueryTile; ++r) {
      const TileIndex q = tile_query(p, cta, r);
      if (q.valid) read_row(l, p.q, query_source_row(p, q.g, q.i), p.dim, es, Load::kTile);
    }
  }
  read_key_tiles(l, p, cta);
  if (f.pooled_keys) {  // a pooled pass: its keys' running max, from its tile of source A
    const QueryTileKeys n = query_tile_keys(p, cta);
    const int64_t tile = pooled_key_tile(p, cta);
    for (int64_t c = 0; c < kKeyTile; ++c) {
      const TileIndex key = tile_key(p, cta, tile, n.direct, c);
      if (key.valid)
        l.write(f.pooled_keys,
                row_of(p.pooled_keys, key.g, key.i) * f.pooled_keys_stride[2],
                es,
                p.dim);
    }
    read_carried(l, p, index_div(cta, query_chunks(p)), tile * kQueryTile, true);
  }
  // Its keys' segment max: y's row, from the key tile; or, where the segment is more than one,
  // by its first query tile's CTA, from k's rows read again.
  const SegmentMax& pool = f.key_pool;
  const int64_t g = index_div(cta, query_chunks(p));
  if (pool.segments > 0 && g < pool.segments) {
    if (pool.len <= kKeyTile) {
      l.write(pool.y, g * pool.dim, es, pool.dim);
    } else if (index_mod(cta, query_chunks(p)) == 0) {
      const Operand x = {pool.x, pool.stride[0], pool.stride[1], pool.stride[2]};
      for (int64_t t = 0; t < pool.len; ++t)
        read_row(l, x, g * pool.len + t, pool.dim, es, Load::kPlain);
      l.write(pool.y, g * pool.dim, es, pool.dim);
    }
  }
  for (const int64_t row : rows) {  // the epilogue: o and lse (merged: read first)
    const int64_t at = output_at(f, 0, 0, row);
    if (f.merge) {
      l.read(f.o, at, es, p.dim, Load::kPlain);
      l.read(f.lse, row, acc, 1, Load::kPlain);
    }
    if (f.mean_with) l.read(f.mean_with, at, es, p.dim, Load::kPlain);
    l.write(f.o, at, es, p.dim);
    l.write(f.lse, row, acc, 1);
  }
}

// A pair's CTAs, both passes' in one ledger: the rows the second reads again after the first
// (q, k, v, and in the backward the gradient rows it adds to) are distinct bytes once.
template <typename Pair, typename Cta>
Traffic pair_traffic(const Pair& pair, Cta cta_walk) {
  Ledger l;
  const Pass& p = pair.first.pass;
  for (int64_t cta = 0; cta < query_ctas(p); ++cta) {
    cta_walk(l, pair.first, cta);
    if (cta < query_ctas(pair.second.pass)) cta_walk(l, pair.second, cta);
  }
  return l.total(heads_of(p.batch, p.heads));
}

}  // namespace

Traffic traffic(const Forward& f) {
  Ledger l;
  for (int64_t cta = 0; cta < query_ctas(f.pass); ++cta) forward_cta(l, f, cta);
  if (f.delta.delta) delta_traffic(l, f.delta);  // its CTAs after the pass's
  return l.total(heads_of(f.pass.batch, f.pass.heads));
}

Traffic traffic(const ForwardPair& pair) {
  return pair_traffic(pair, &forward_cta);
}

Traffic traffic(const Delta& d) {
  Ledger l;
  delta_traffic(l, d);
  return l.total(heads_of(d.batch, d.heads));
}

namespace {

// The CTA of segment g's query taking its query pool back (Backward::query_pool): the segment's
// rows of q read again, the query's gradient as it was just stored (dy's row g), and one element
// of dx a column (at the arg-max, which depends on the data: counted as the segment's first row)
// read and written.
void query_pool_part(Ledger& l, const Backward& bw, int64_t g) {
  const SegmentMax& pool = bw.query_pool;
  if (pool.segments == 0 || g >= pool.segments) return;
  const int64_t es = element_bytes(pool.dtype);
  const Operand x = {pool.x, pool.stride[0], pool.stride[1], pool.stride[2]};
  for (int64_t t = 0; t < pool.len; ++t)
    read_row(l, x, g * pool.len + t, pool.dim, es, Load::kPlain);
  l.read(pool.dy,
         segment_max_dy_at(pool, 0, 0, g, 0),
         pool.dy_acc ? acc_bytes(pool.dtype) : es,
         pool.dim,
         Load::kPlain);
  const int64_t at = g * pool.len * pool.dx_stride[2];
  l.read(pool.dx, at, es, pool.dim, Load::kPlain);
  l.write(pool.dx, at, es, pool.dim);
}

// One CTA of a segment_backward pass: each source's walk loads its query tile itself; dq comes
// from the walks' dS and keys, so it loads nothing more.
void segment_cta(Ledger& l, const Backward& bw, int64_t cta) {
  const Pass& p = bw.pass;
  if (bw.made_delta) {  // its queries' delta: o's rows read, delta written
    const int64_t es = element_bytes(p.dtype);
    for (const int64_t row : query_rows(p, cta)) {
      read_row(l, bw.o, row, p.dim, es, Load::kPlain);
      if (bw.other_delta) l.read(bw.other_delta, row, acc_bytes(p.dtype), 1, Load::kPlain);
      l.write(bw.made_delta, row, acc_bytes(p.dtype), 1);
    }
  }
  dkv_walk(l, bw, Keys::kSourceA, cta, 0);
  if (p.summaries) dkv_walk(l, bw, Keys::kSegmentSummaries, cta, 0);
  const SegmentMax& pool = bw.key_pool;
  if (pool.segments > 0 && cta < pool.segments) {
    // Its keys' segment max backward: dy's row read (in each slab), and one element of dk a
    // column (at the arg-max, which depends on the data: counted as the segment's first row) read
    // and written.
    for (int64_t slab = 0; slab < pool.dy_slabs; ++slab)
      l.read(pool.dy,
             segment_max_dy_at(pool, 0, slab, cta, 0),
             pool.dy_acc ? acc_bytes(pool.dtype) : element_bytes(pool.dtype),
             pool.dim,
             Load::kPlain);
    const int64_t at = cta * pool.len * pool.dx_stride[2], es = element_bytes(pool.dtype);
    l.read(pool.dx, at, es, pool.dim, Load::kPlain);
    l.write(pool.dx, at, es, pool.dim);
  }
  if (bw.pools_dq.kind == GradOut::kNone) {
    for (const int64_t row : query_rows(p, cta)) write_grad(l, bw.dq, row, p);
    query_pool_part(l, bw, cta);
    return;
  }
  // The pools' backward in the epilogue: q's rows and d_pooled_keys' into the tiles, each
  // query's and key's gradient row added into (an upper bound: it adds at the arg-maxes).
  const int64_t es = element_bytes(p.dtype);
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const TileIndex q = tile_query(p, cta, r);
    if (!q.valid) continue;
    const int64_t row = query_source_row(p, q.g, q.i);  // q's, and its gradient's
    read_row(l, p.q, row, p.dim, es, Load::kTile);
    write_grad(l, bw.pools_dq, row, p);
  }
  for (int64_t c = 0; c < kKeyTile; ++c) {
    const TileIndex key = dkv_key(p, false, cta, c);
    if (!key.valid) continue;
    const int64_t row = row_of(p.key, key.g, key.i);
    read_row(l, bw.d_pooled_keys, row_of(p.pooled_keys, key.g, key.i), p.dim, es, Load::kTile);
    const int64_t at = grad_at(bw.dk, 0, 0, row);  // dk's row, read and written again
    l.read(bw.dk.data, at, es, p.dim, Load::kPlain);
    l.write(bw.dk.data, at, es, p.dim);
  }
}

// One CTA of the dq kernel: its queries (delta given, or made by the walk), its key tiles, and
// its rows of dq.
void dq_cta(Ledger& l, const Backward& bw, int64_t cta) {
  const Pass& p = bw.pass;
  const auto rows = query_rows(p, cta);
  if (rows.empty()) return;
  for (int64_t r = 0; r < kQueryTile; ++r) {
    const TileIndex q = tile_query(p, cta, r);
    if (q.valid) read_query(l, bw, q, Load::kPlain);
  }
  const int64_t chunks = query_chunks(p);  // the queries before the tile
  read_carried(l, p, index_div(cta, chunks), index_mod(cta, chunks) * kQueryTile, false);
  read_key_tiles(l, p, cta);
  for (const int64_t row : rows) write_grad(l, bw.dq, row, p);
  query_pool_part(l, bw, cta);
}

// A walk's key tile CTA's part of its key pool's backward (Backward::key_pool): its segment's
// rows of k read again, and, by the CTA holding each column's arg-max (counted as the segment's
// first tile's), dy's row read (in each slab) and one element of dk a column read and written.
void walk_key_pool(Ledger& l, const Backward& bw, int64_t cta) {
  const SegmentMax& pool = bw.key_pool;
  const TileIndex tile = dkv_key(bw.pass, false, cta, 0);
  if (pool.segments == 0 || tile.g >= pool.segments) return;
  const int64_t es = element_bytes(pool.dtype);
  const Operand x = {pool.x, pool.stride[0], pool.stride[1], pool.stride[2]};
  for (int64_t t = 0; t < pool.len; ++t)
    read_row(l, x, tile.g * pool.len + t, pool.dim, es, Load::kPlain);
  if (tile.i != 0) return;
  for (int64_t slab = 0; slab < pool.dy_slabs; ++slab)
    l.read(pool.dy,
           segment_max_dy_at(pool, 0, slab, tile.g, 0),
           pool.dy_acc ? acc_bytes(pool.dtype) : es,
           pool.dim,
           Load::kPlain);
  const int64_t at = tile.g * pool.len * pool.dx_stride[2];
  l.read(pool.dx, at, es, pool.dim, Load::kPlain);
  l.write(pool.dx, at, es, pool.dim);
}

}  // namespace

Traffic traffic(const Backward& bw) {
  const Pass& p = bw.pass;
  Ledger l;
  if (segment_backward(p)) {
    for (int64_t cta = 0; cta < query_ctas(p); ++cta) segment_cta(l, bw, cta);
    return l.total(heads_of(p.batch, p.heads));
  }
  for (int64_t cta = 0; cta < key_ctas(p, false); ++cta) {
    dkv_walk(l, bw, Keys::kSourceA, cta, 0);
    walk_key_pool(l, bw, cta);
  }
  if (p.summaries && p.by_segment) {
    for (int64_t cta = 0; cta < key_ctas(p, true); ++cta)
      dkv_walk(l, bw, Keys::kSegmentSummaries, cta, 0);
  } else if (prefix_summaries(p)) {
    const int64_t parts = ceil_div(p.query.segments, segments_per_part(p));
    for (int64_t st = 0; st < ceil_div(p.summary_count, kKeyTile); ++st)
      for (int64_t part = 0; part < parts; ++part)
        dkv_walk(l, bw, Keys::kPrefixSummaries, st, part);
  }
  for (int64_t cta = 0; cta < query_ctas(p); ++cta) dq_cta(l, bw, cta);
  return l.total(heads_of(p.batch, p.heads));
}

Traffic traffic(const BackwardPair& pair) {
  if (segment_backward(pair.first.pass)) return pair_traffic(pair, &segment_cta);
  // Two walks: each launch's CTAs in one ledger, as one pass's walk and dq are.
  const Pass &p = pair.first.pass, &r = pair.second.pass;
  Ledger l;
  for (int64_t cta = 0; cta < key_ctas(p, false); ++cta) {
    dkv_walk(l, pair.first, Keys::kSourceA, cta, 0);
    if (cta >= key_ctas(r, false)) continue;
    dkv_walk(l, pair.second, Keys::kSourceA, cta, 0);
    walk_key_pool(l, pair.second, cta);
  }
  for (int64_t cta = 0; cta < query_ctas(p); ++cta) {
    dq_cta(l, pair.first, cta);
    if (cta < query_ctas(r)) dq_cta(l, pair.second, cta);
  }
  return l.total(heads_of(p.batch, p.heads));
}

// The scans read and write each element of their lines once a tensor, with plain loads: counted
// rather than walked, and distinct as requested.
Traffic traffic(const RunningMaxes& r) {
  Traffic t;
  for (int i = 0; i < r.count; ++i) {
    const RunningMax& s = r.part[i];
    const double bytes = double(running_max_lines(s)) * double(s.n * element_bytes(s.dtype));
    if (!s.dy) {  // x read, y written
      t.read += bytes;
      t.written += bytes;
    } else {  // x and dy read (and dx, accumulated into), dx written
      t.read += (s.accumulate ? 3 : 2) * bytes;
      t.written += bytes;
    }
  }
  t.unique = t.requested();
  return t;
}

Traffic traffic(const SegmentMaxes& m) {
  Traffic t;
  for (int i = 0; i < m.count; ++i) {
    const SegmentMax& s = m.part[i];
    const double es = double(element_bytes(s.dtype)), heads = heads_of(s.batch, s.heads);
    const double pooled = heads * es * double(s.segments * s.len * s.dim);
    const double summaries = heads * es * double(s.segments * s.dim);
    const double dy =
        double(s.dy_slabs) * (s.dy_acc ? summaries / es * double(acc_bytes(s.dtype)) : summaries);
    if (!s.dy) {  // x read, y written
      t.read += pooled;
      t.written += summaries;
    } else if (s.accumulate) {  // x and dy read; dx at each arg-max read and written
      t.read += pooled + summaries + dy;
      t.written += summaries;
    } else {  // x and dy read; every row of dx written
      t.read += pooled + dy;
      t.written += heads * es * double(s.rows * s.dim);
    }
  }
  t.unique = t.requested();
  return t;
}

}  // namespace combiner::attention::fused
