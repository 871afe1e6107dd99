// The fused glue's checks of what the kernels will index (function.cpp calls them before any
// launch): shapes and devices of the operands, geometries against the rows of the tensors they
// read, and the row ownership that decides how gradients are written.
#include "attention/fused/checks.h"

#include "attention/fused/pool_stage.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <vector>

namespace combiner::attention::fused_glue {

namespace {
std::atomic<bool> poisoned{false};
}  // namespace

torch::Tensor unset(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  auto t = torch::empty(sizes, options);
  if (poisoned.load(std::memory_order_relaxed)) t.fill_(std::numeric_limits<double>::quiet_NaN());
  return t;
}

bool poison_unset(bool on) {
  return poisoned.exchange(on);
}

// Whether the segments of g own disjoint rows that together are every row 0..rows-1: blocks,
// columns, or whole blocks read right to left (which exist whole or not at all); the segments
// whose first row is below 0 have none (first = -lag * seg_stride: a source `lag` segments behind
// its queries), and the others count.
bool covers(const fused::Geometry& g, int64_t rows) {
  const int64_t lag =
      g.first < 0 && g.seg_stride > 0 && -g.first % g.seg_stride == 0 ? -g.first / g.seg_stride : 0;
  const int64_t first = g.first + lag * g.seg_stride, segments = g.segments - lag;
  const bool blocks = g.row_stride == 1 && g.seg_stride == g.seg_len && first == 0;
  const bool columns = g.seg_stride == 1 && g.row_stride == segments && first == 0;
  const bool reversed = g.row_stride == -1 && g.seg_stride == g.seg_len && first == g.seg_len - 1 &&
                        segments * g.seg_len == rows;
  return (blocks || columns || reversed) && segments * g.seg_len >= rows && g.limit >= rows;
}

// The lowest row a geometry reads is not negative: a segment whose first row is below 0 has
// none; one read right to left ends at its first row minus seg_len - 1.
bool non_negative(const fused::Geometry& g) {
  if (g.segments == 0 || g.seg_len == 0) return true;
  return g.seg_stride >= 0 && (g.row_stride >= 0 || g.first + (g.seg_len - 1) * g.row_stride >= 0);
}

// What the kernels index must exist: o, lse and dq have exactly Lq rows, so every pass's queries
// end at Lq; a geometry never reaches past the rows of the tensor it reads; the summary rows a
// pass reads (summary_count = rows of ks) exist in u; every tensor on q's device with q's B, H, D.
void check_frame(const torch::Tensor& q, const torch::Tensor& x, const char* name) {
  TORCH_CHECK(
      x.dim() == 4 && x.size(0) == q.size(0) && x.size(1) == q.size(1) && x.size(3) == q.size(3),
      "fused attention: ",
      name,
      " must be [B, H, rows, D] with q's B, H, D ",
      q.sizes(),
      ", got ",
      x.sizes());
  TORCH_CHECK(x.device() == q.device(),
              "fused attention: ",
              name,
              " is on ",
              x.device(),
              ", q on ",
              q.device());
}

void fits(const fused::Geometry& g, int64_t rows, const char* what) {
  // (The kernels hold a row of one head in an int: kernel_tile.cuh PackedTables.)
  TORCH_CHECK(g.limit <= std::numeric_limits<int32_t>::max(),
              "fused attention: ",
              what,
              " has ",
              g.limit,
              " rows per head; at most 2^31 - 1 are supported");
  TORCH_CHECK(g.limit <= rows,
              "fused attention: ",
              what,
              " rows end at ",
              g.limit,
              " but the tensor has ",
              rows);
  TORCH_CHECK(non_negative(g),
              "fused attention: ",
              what,
              " reads rows below 0 (first ",
              g.first,
              ", seg_stride ",
              g.seg_stride,
              ", row_stride ",
              g.row_stride,
              ")");
}

// u_rows: the rows of u (given, or made by a local stage); 0 when there is none.
void check_operands(const torch::Tensor& q,
                    const torch::Tensor& k,
                    const torch::Tensor& v,
                    int64_t ks_rows,
                    int64_t u_rows,
                    const std::vector<FusedPass>& passes) {
  const int64_t Lq = q.size(2);
  TORCH_CHECK(!passes.empty() && covers(passes[0].query, Lq) && covers(passes.back().query, Lq),
              "fused attention: the first and last pass must cover every query row");
  check_frame(q, k, "k");
  check_frame(q, v, "v");
  for (const auto& p : passes) {
    fits(p.query, Lq, "query");
    TORCH_CHECK(p.query.limit == Lq,
                "fused attention: a pass's queries end at ",
                p.query.limit,
                ", q has ",
                Lq,
                " rows (o, lse and dq are indexed by it)");
    const bool summaries = p.summaries || p.a_from_summaries;
    TORCH_CHECK(!summaries || (ks_rows > 0 && u_rows > 0),
                "fused attention: a pass reads summaries but ks or u is undefined");
    fits(p.key, p.a_from_summaries ? ks_rows : k.size(2), "source A key");
    fits(p.value, p.a_from_summaries ? u_rows : v.size(2), "source A value");
    if (p.summaries && p.by_segment) {
      TORCH_CHECK(!p.a_from_summaries,
                  "fused attention: a pass reads the summaries as source A or as source B by "
                  "segment, not both");
      TORCH_CHECK(p.summary_key.segments == p.query.segments &&
                      p.summary_value.segments == p.query.segments,
                  "fused attention: source B by segment has ",
                  p.summary_key.segments,
                  " key and ",
                  p.summary_value.segments,
                  " value segments, the queries ",
                  p.query.segments);
      fits(p.summary_key, ks_rows, "source B key");
      fits(p.summary_value, u_rows, "source B value");
      for (int64_t g = 0; g < p.query.segments; ++g)
        TORCH_CHECK(fused::valid_count(p.summary_value, g) >= fused::valid_count(p.summary_key, g),
                    "fused attention: source B's segment ",
                    g,
                    " has fewer values than keys");
    } else if (p.summaries) {
      TORCH_CHECK(u_rows >= ks_rows,
                  "fused attention: ",
                  ks_rows,
                  " summary keys but only ",
                  u_rows,
                  " summary values");
    }
  }
}

// Each pool reads whole segments of k or q that exist and writes rows of its slot that no other
// pool writes; a slot the pools make is not also given.
int64_t check_pools(const torch::Tensor& x,
                    const torch::Tensor& given,
                    const std::vector<FusedPool>& pools,
                    bool query_side) {
  const char* slot = query_side ? "qs" : "ks";
  std::vector<std::pair<int64_t, int64_t>> spans;  // [first, end) of each pool's rows
  for (const auto& p : pools) {
    if (p.query_side != query_side) continue;
    TORCH_CHECK(p.segments >= 1 && p.len >= 1 && p.segments * p.len <= x.size(2) && p.first >= 0,
                "fused attention: a pool of ",
                p.segments,
                " segments of ",
                p.len,
                " rows from row ",
                p.first,
                " does not fit ",
                x.size(2),
                " rows");
    TORCH_CHECK(p.kind == FusedPool::Kind::kSegmentMax || p.dim == 2 || p.dim == 3,
                "fused attention: a running max pool runs along dim 2 or 3, got ",
                p.dim);
    TORCH_CHECK(
        p.read_steps == 0 || (p.kind == FusedPool::Kind::kRunningMax && p.read_steps <= p.steps()),
        "fused attention: a pool reads ",
        p.read_steps,
        " steps of lines of ",
        p.steps(),
        " (a running max's first steps, or 0: all)");
    spans.emplace_back(p.first, p.first + p.rows());
  }
  if (spans.empty()) return given.defined() ? given.size(2) : 0;
  TORCH_CHECK(!given.defined(), "fused attention: ", slot, " is both given and pooled");
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    TORCH_CHECK(spans[i].first >= spans[i - 1].second,
                "fused attention: two pools write row ",
                spans[i].first,
                " of ",
                slot);
  return spans.back().second;
}

// How many local queries write each row of u (Lu rows).
std::vector<int64_t> local_writes(const std::vector<FusedPass>& local, int64_t Lu) {
  std::vector<int64_t> writes(Lu, 0);
  for (const auto& p : local)
    for (int64_t g = 0; g < p.query.segments; ++g)
      for (int64_t t = 0; t < fused::valid_count(p.query, g); ++t) {
        const int64_t r = fused::row_of(p.query, g, t);
        if (r >= 0 && r < Lu) ++writes[r];
      }
  return writes;
}

// A local stage: its passes read their queries from `queries` (qs, or q itself) and keys and
// values from k, v (no summaries), and store u's rows (u has the queries' rows), each row at most
// once; rows no local query writes are zeros.
void check_local(int64_t Lu,
                 const torch::Tensor& k,
                 const torch::Tensor& v,
                 const std::vector<FusedPass>& local) {
  for (const auto& p : local) {
    TORCH_CHECK(!p.summaries && !p.a_from_summaries,
                "fused attention: a local pass reads no summaries");
    TORCH_CHECK(p.query.limit == Lu,
                "fused attention: a local pass's queries end at ",
                p.query.limit,
                ", u has ",
                Lu,
                " rows");
    fits(p.query, Lu, "local query");
    fits(p.key, k.size(2), "local key");
    fits(p.value, v.size(2), "local value");
  }
  const auto writes = local_writes(local, Lu);
  TORCH_CHECK(*std::max_element(writes.begin(), writes.end()) <= 1,
              "fused attention: two local queries write the same row of u");
}

namespace {
// The rows a pool's running max runs over, line by line (x's, or with `slot` the slot's it
// writes), as a pass's geometry: line i is segment i, its step t index t.
fused::Geometry pool_rows(const FusedPool& p, bool slot) {
  const int64_t n = p.segments * p.len, first = slot ? p.first : 0;
  if (p.dim == 2)  // down the segments: line c, step s at row s * len + c
    return {p.len,
            p.segments,
            1,
            p.reverse ? -p.len : p.len,
            first + n,
            first + (p.reverse ? n - p.len : 0)};
  return {p.segments,
          p.len,
          p.len,
          p.reverse ? -1 : 1,
          first + n,  // along each segment
          first + (p.reverse ? p.len - 1 : 0)};
}
// Whether b names the first rows of each of a's lines, index by index (all of them, or the
// first b.seg_len of each: a running max made over the first steps of each line is the pool's
// value at those steps).
bool names_line_starts(const fused::Geometry& a, const fused::Geometry& b) {
  if (a.segments != b.segments || b.seg_len > a.seg_len) return false;
  for (int64_t g = 0; g < a.segments; ++g) {
    const int64_t n = fused::valid_count(b, g);
    if (n > fused::valid_count(a, g)) return false;
    for (int64_t t = 0; t < n; ++t)
      if (fused::row_of(a, g, t) != fused::row_of(b, g, t)) return false;
  }
  return true;
}
}  // namespace

std::vector<char> named_rows(const fused::Geometry& g, int64_t rows) {
  std::vector<char> named(rows, 0);
  for (int64_t s = 0; s < g.segments; ++s)
    for (int64_t t = 0, n = fused::valid_count(g, s); t < n; ++t) {
      const int64_t r = fused::row_of(g, s, t);
      if (r >= 0 && r < rows) named[r] = 1;
    }
  return named;
}

bool names_only(const std::vector<fused::Geometry>& reads, const std::vector<char>& written) {
  const int64_t rows = int64_t(written.size());
  for (const auto& g : reads)
    for (int64_t s = 0; s < g.segments; ++s)
      for (int64_t t = 0, n = fused::valid_count(g, s); t < n; ++t) {
        const int64_t r = fused::row_of(g, s, t);
        if (r < 0 || r >= rows || !written[r]) return false;
      }
  return true;
}

std::vector<fused::Geometry> slot_reads(const std::vector<FusedPass>& passes,
                                        bool values,
                                        int64_t rows) {
  std::vector<fused::Geometry> reads;
  for (const auto& p : passes) {
    if (p.a_from_summaries) reads.push_back(values ? p.value : p.key);
    if (p.summaries && p.by_segment) reads.push_back(values ? p.summary_value : p.summary_key);
    if (p.summaries && !p.by_segment) reads.push_back({1, rows, rows, 1, rows});
  }
  return reads;
}

void check_pooled(const torch::Tensor& q,
                  const std::vector<FusedPass>& local,
                  const std::vector<FusedPool>& pools,
                  const std::vector<FusedPass>& passes) {
  std::vector<char> matched(pools.size(), 0);
  bool any = false;
  for (const auto& pass : local) {
    if (!pass.pooled) continue;
    any = true;
    TORCH_CHECK(
        pools_fit_on_chip(pass, q) && fused::same_rows(pass.pooled_query, pass.key),
        "fused attention: a pooled local pass must have its queries pooled from its keys' "
        "rows, as many a segment, masked causal or none (fused/kernel_plan.h pools_on_chip)");
    fits(pass.pooled_query, q.size(2), "pooled local query");
    // Its pools: one of k over its keys' rows into pooled_keys' rows of ks, one of q over the
    // same rows into its queries' rows of qs.
    for (const bool query_side : {false, true}) {
      const auto& into = query_side ? pass.query : pass.pooled_keys;
      int found = 0;
      for (size_t i = 0; i < pools.size(); ++i) {
        const FusedPool& p = pools[i];
        if (!p.on_chip || p.query_side != query_side || matched[i]) continue;
        if (p.kind == FusedPool::Kind::kRunningMax &&
            names_line_starts(pool_rows(p, false), pass.key) &&
            names_line_starts(pool_rows(p, true), into)) {
          matched[i] = 1;
          ++found;
          break;
        }
      }
      TORCH_CHECK(found == 1,
                  "fused attention: a pooled local pass needs a running max pool made on chip of ",
                  query_side ? "q" : "k",
                  " over its keys' rows into its ",
                  query_side ? "queries' rows of qs" : "pooled keys' rows of ks");
    }
  }
  // A segment max made on chip: by a local pass over its segments of k (its keys), or of q (its
  // queries), into the whole slot of its side (the kernels write its rows contiguous).
  for (size_t i = 0; i < pools.size(); ++i) {
    const FusedPool& p = pools[i];
    if (!p.on_chip || p.kind != FusedPool::Kind::kSegmentMax) continue;
    TORCH_CHECK(fused_pools::slot_rows(pools, p.query_side) == p.segments,
                "fused attention: a segment max made on chip pools ",
                p.query_side ? "q into the whole qs" : "k into the whole ks",
                " slot");
    matched[i] = std::any_of(local.begin(), local.end(), [&](const FusedPass& pass) {
      return p.query_side ? query_pool_fits_on_chip(pass, q, p) : key_pool_fits_on_chip(pass, q, p);
    });
  }
  for (size_t i = 0; i < pools.size(); ++i)
    TORCH_CHECK(!pools[i].on_chip || matched[i],
                "fused attention: a pool made on chip (pool ",
                i,
                ") has no local pass that makes it");
  if (!any) return;
  // The running maxes made on chip write ks's rows of their passes' keys (pooled_keys), which
  // may be the first steps of each line only: the joint passes read none of the others.
  const int64_t ks_rows = fused_pools::slot_rows(pools, /*query_side=*/false);
  std::vector<char> written(ks_rows, 0);
  for (const auto& pool : pools)
    if (!pool.query_side && !(pool.on_chip && pool.kind == FusedPool::Kind::kRunningMax))
      for (int64_t r = pool.first; r < pool.first + pool.rows(); ++r) written[r] = 1;
  for (const auto& pass : local) {
    if (!pass.pooled) continue;
    const auto made = named_rows(pass.pooled_keys, ks_rows);
    for (int64_t r = 0; r < ks_rows; ++r) written[r] = written[r] || made[r];
  }
  TORCH_CHECK(names_only(slot_reads(passes, /*values=*/false, ks_rows), written),
              "fused attention: a joint pass reads a row of ks that no pool or pooled local pass "
              "makes");
}

// Whether no two indices (g, t) of g name the same row: each row is then written by one CTA,
// once, in a pass, so a later pass may add its part in place.
bool injective(const fused::Geometry& g, int64_t rows) {
  if (covers(g, rows)) return true;
  std::vector<char> seen(rows, 0);
  for (int64_t s = 0; s < g.segments; ++s)
    for (int64_t t = 0; t < fused::valid_count(g, s); ++t) {
      const int64_t r = fused::row_of(g, s, t);
      if (r < 0 || r >= rows || seen[r]++) return false;
    }
  return true;
}

void check_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  TORCH_CHECK(
      q.dim() == 4 && k.dim() == 4 && v.dim() == 4 &&
          q.sizes().slice(0, 2) == k.sizes().slice(0, 2) &&
          k.sizes().slice(0, 3) == v.sizes().slice(0, 3) && q.size(3) == k.size(3),
      "fused attention: expected q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv], got q ",
      q.sizes(),
      ", k ",
      k.sizes(),
      ", v ",
      v.sizes());
  TORCH_CHECK(q.size(3) == v.size(3),
              "fused attention: needs D == Dv, got q ",
              q.sizes(),
              " and v ",
              v.sizes());
}

void check_call(const torch::Tensor& q,
                const torch::Tensor& k,
                const torch::Tensor& v,
                const FusedCall& call) {
  check_qkv(q, k, v);
  const auto& local = call.local;
  if (call.ks.defined()) check_frame(q, call.ks, "ks");
  if (local.empty()) {
    TORCH_CHECK(!call.qs.defined() && call.pools.empty(),
                "fused attention: summary queries and pools need a local stage");
    if (call.u.defined()) check_frame(q, call.u, "u");
    check_operands(q,
                   k,
                   v,
                   call.ks.defined() ? call.ks.size(2) : 0,
                   call.u.defined() ? call.u.size(2) : 0,
                   call.passes);
    return;
  }
  TORCH_CHECK(!call.u.defined(), "fused attention: a local stage makes u; none may be given");
  if (call.qs.defined()) check_frame(q, call.qs, "qs");
  const int64_t ks_rows = check_pools(k, call.ks, call.pools, /*query_side=*/false);
  const int64_t qs_rows = check_pools(q, call.qs, call.pools, /*query_side=*/true);
  // The local stage's queries: qs (given or pooled), or q itself up to where they end.
  const int64_t query_rows = qs_rows > 0 ? qs_rows : local.front().query.limit;
  if (qs_rows == 0)
    for (const auto& p : local) fits(p.query, q.size(2), "local query of q");
  check_local(query_rows, k, v, local);
  check_pooled(q, local, call.pools, call.passes);
  check_operands(q, k, v, ks_rows, query_rows, call.passes);
}

}  // namespace combiner::attention::fused_glue
