// The fused plans of the axial Combiner variants (rowmajor, vertical, horizontal; the mixture
// averages the last two): each is one softmax per query over a row pass, a column pass and the
// spans, merged by log-sum-exp; the spans (pooled keys ks, local expectations u) are read as
// source A of a pass of their own, or as source B of the row or column pass whose queries they
// serve, addressed by Geometry::first where a query's span sits one row or one column away from
// it (first = -W: segment g reads row g - 1's spans; segment 0 has none). Plain max pools (whole
// rows, running maxes) are made in the fused call (FusedPool); DeepSets maps and running means stay
// LibTorch ops (autograd); every u is a fused pass too.
#include <torch/torch.h>

#include "attention/fused/fused.h"
#include "attention/span_ops.h"

namespace combiner::attention {

namespace {
// Row R up to the query (causal: rowmajor's direct part), and column c above it (strict): with
// the row pass, the axial support that vertical and horizontal attend directly. The column pass
// covers every query, so it runs last.
FusedPass row_pass(int64_t length, int64_t W) {
  FusedPass p;
  p.query = p.key = p.value = {(length + W - 1) / W, W, W, 1, length};
  p.mask = fused::Mask::kCausal;
  return p;
}
FusedPass column_pass(int64_t length, int64_t W) {
  FusedPass p;
  p.query = p.key = p.value = {W, (length + W - 1) / W, 1, W, length};
  p.mask = fused::Mask::kStrict;
  return p;
}

torch::Tensor operand(const torch::Tensor& summary, const torch::Tensor& like) {
  return summary.to(like.scalar_type());
}
// The fused path's cumulative pools: a max in the running-max kernel (fused/kernel.h: one launch
// each way, no indices kept, on the CPU model too, so that the CPU counts what a GPU holds and
// launches), a mean as LibTorch's running sum.
torch::Tensor cumulative(const SpanSummary& summary,
                         const torch::Tensor& x,
                         int64_t dim,
                         bool reverse) {
  return summary.is_max() ? fused_running_max(x, dim, reverse)
                          : summary.cumulative(x, dim, reverse, /*keep_indices=*/false);
}
// x's rows as the summary pools them (undefined for a plain max of x itself: a pool in the call).
torch::Tensor pooled_rows(
    const SpanSummary& summary, const torch::Tensor& x, bool query_side, int64_t spans, int64_t W) {
  if (summary.is_max() && summary.exact_in_input_dtype(query_side)) return {};
  return query_side ? span_queries(x, summary, spans, W) : span_keys(x, summary, spans, W);
}
torch::Tensor flat(const torch::Tensor& x) {
  return x.reshape({x.size(0), x.size(1), x.size(2) * x.size(3), x.size(4)});
}
}  // namespace

// rowmajor's span part lives in a per-column pass because its span value u[(r, c)] depends on the
// query's column: column c is a causal attention of its n queries over the n - 1 row summaries
// (ks[r], u[(r, c)]): W * n^2 / 2 terms = L n / 2 per head, each D x 2 products x 2 FLOP, the
// same work as combiner-fixed's summary part, reading u once per column (L x D per head). Had
// each row's query tile gathered the u of its own columns instead, it would read R x W x D values
// per row R: L n D / 2 per head, n / 2 = 64 times more at L = 12288, W = 96, and no tensor core.
std::vector<FusedPass> rowmajor_joint_passes(int64_t length, int64_t row_len) {
  const int64_t W = row_len, n = (length + W - 1) / W, spans = n - 1;
  std::vector<FusedPass> passes = {row_pass(length, W)};
  if (spans > 0) {
    // Column c: query (R, c) sees row r < R through key ks[r] and value u[(r, c)].
    FusedPass column;
    column.query = {W, n, 1, W, length};
    column.key = {W, spans, 0, 1, spans};
    column.value = {W, spans, 1, W, spans * W};
    column.mask = fused::Mask::kStrict;
    column.a_from_summaries = true;
    passes.push_back(column);
  }
  return passes;
}

// vertical's spans: (R, c') sees, for every column c != c' and R >= 1, column c above row R, whose
// key is the cumulative pooled key ks[(R - 1, c)] and value u[(R - 1, c)]: source B of the row
// pass, whose segment R reads row R - 1 of ks and u (first = -W), masked c != c'. One softmax
// over the row and its spans: no second pass over the same queries, no merge of o.
std::vector<FusedPass> vertical_joint_passes(int64_t length, int64_t row_len) {
  const int64_t W = row_len, n = (length + W - 1) / W, spans = n - 1;
  std::vector<FusedPass> passes = {row_pass(length, W)};
  if (spans == 0) return passes;
  if (W > 1) {
    const fused::Geometry above = {n, W, W, 1, spans * W, /*first=*/-W};
    passes[0].with_spans(above, above, fused::Mask::kOthers);
  }
  passes.push_back(column_pass(length, W));
  return passes;
}

// horizontal's spans: (R, c) sees, for every row r < R, its prefix 0..c-1 (when c > 0) and its
// suffix c+1..W-1 (when c < W - 1). ks and u hold the inclusive prefix summaries [(r, c)] =
// columns 0..c in rows 0..spans*W-1 and the inclusive suffix ones (c..W-1) in the next spans*W
// rows, so (R, c) reads prefix (r, c - 1) and suffix (r, c + 1), masked r < R: the prefixes as
// source B of the column pass (column c reads column c - 1 of ks: first = -1, none for c = 0),
// the suffixes in a per-column pass of their own over the columns 0..W-2 (key first =
// spans * W + 1).
std::vector<FusedPass> horizontal_joint_passes(int64_t length, int64_t row_len) {
  const int64_t W = row_len, n = (length + W - 1) / W, spans = n - 1;
  std::vector<FusedPass> passes = {row_pass(length, W)};
  if (spans == 0) return passes;
  FusedPass column = column_pass(length, W);
  if (W > 1) {
    FusedPass suffix;
    suffix.query = {W - 1, n, 1, W, length};
    suffix.key = suffix.value = {W - 1, spans, 1, W, 2 * spans * W, /*first=*/spans * W + 1};
    suffix.mask = fused::Mask::kStrict;
    suffix.a_from_summaries = true;
    passes.push_back(suffix);
    const fused::Geometry before = {W, spans, 1, W, spans * W, /*first=*/-1};
    column.with_spans(before, before, fused::Mask::kStrict);
  }
  passes.push_back(column);
  return passes;
}

torch::Tensor fused_combiner_rowmajor(const torch::Tensor& q,
                                      const torch::Tensor& k,
                                      const torch::Tensor& v,
                                      const SpanSummary& summary,
                                      int64_t row_len) {
  check_inputs(q, k, v);
  const int64_t L = q.size(2), D = q.size(3), W = row_len;
  const int64_t spans = (L + W - 1) / W - 1;  // every row but the last is a span
  const double scale = score_scale(D);
  const auto passes = rowmajor_joint_passes(L, W);
  if (spans == 0) return fused_attention(q, k, v, {}, {}, passes, scale);
  std::vector<FusedPool> pools;
  const auto ks = span_pool_in_call(k, summary, /*query_side=*/false, spans, W, pools);
  // u[(r, c)]: q_(r, c)'s unmasked softmax over row r, for the rows before the last (read from
  // q itself: u has their spans * W rows, each written once).
  FusedPass local;
  local.query = {spans, W, W, 1, spans * W};
  local.key = local.value = {spans, W, W, 1, spans * W};
  local.mask = fused::Mask::kNone;
  // The local pass makes the rows' key maxes (from its key tiles; a row of more than one, from
  // k's rows again) and no pool launch runs in the forward; each row one tile (W <= 64; L 3072 at
  // W 48), it takes their backward too, and the pool kernels do not run.
  if (pools.size() == 1 && key_pool_fits_on_chip(local, q, pools[0])) pools[0].on_chip = true;
  return fused_attention_with_local(q, k, v, ks, {}, {local}, passes, scale, pools);
}

namespace {
FusedCall vertical_call(const torch::Tensor& q,
                        const torch::Tensor& k,
                        const SpanSummary& summary,
                        int64_t row_len) {
  const int64_t L = q.size(2), D = q.size(3), W = row_len;
  const int64_t spans = (L + W - 1) / W - 1;  // the whole rows whose columns are spans
  FusedCall call;
  call.scale = score_scale(D);
  call.passes = vertical_joint_passes(L, W);
  if (spans == 0) return call;
  // Row r of the cumulative pools summarises column c's rows 0..r.
  auto& pools = call.pools;
  const auto down = [&](const torch::Tensor& x, bool query_side) -> torch::Tensor {
    const auto rows = pooled_rows(summary, x, query_side, spans, W);
    if (!rows.defined()) {
      pools.push_back(FusedPool::running_max(query_side, spans, W, 2, false, 0));
      return {};
    }
    return operand(flat(cumulative(summary, rows, 2, false)), x);
  };
  call.ks = down(k, false);
  call.qs = down(q, true);
  // u[(r, c)]: qs[(r, c)]'s causal attention down column c (rows 0..r).
  FusedPass local;
  local.query = local.key = local.value = {W, spans, 1, W, spans * W};
  local.mask = fused::Mask::kCausal;
  // Both pools max pools in the call: the local pass pools q and k down its column in its own
  // tiles (ks's rows are k's), forward and backward, and no pool kernel makes them. Where each
  // column is one tile (spans <= 64: L 3072 at W 48 or 96) its backward also takes the pools'
  // backward; else the pool kernel does (fused/kernel_plan.h pools_backward_on_chip).
  if (pools.size() == 2 && pools_fit_on_chip(local, q)) {
    local.pooling(local.key);
    for (auto& p : pools) p.on_chip = true;
  }
  call.local = {local};
  return call;
}

FusedCall horizontal_call(const torch::Tensor& q,
                          const torch::Tensor& k,
                          const SpanSummary& summary,
                          int64_t row_len) {
  const int64_t L = q.size(2), D = q.size(3), W = row_len;
  const int64_t spans = (L + W - 1) / W - 1;  // the whole rows whose prefixes/suffixes are spans
  FusedCall call;
  call.scale = score_scale(D);
  call.passes = horizontal_joint_passes(L, W);
  // (A row of one column has neither prefix nor suffix.)
  if (spans == 0 || W == 1) return call;
  // ks, qs: rows 0..spans*W-1 the inclusive prefixes, the next spans*W the inclusive suffixes.
  auto& pools = call.pools;
  const auto both = [&](const torch::Tensor& x, bool query_side) -> torch::Tensor {
    const auto rows = pooled_rows(summary, x, query_side, spans, W);
    if (!rows.defined()) {
      pools.push_back(FusedPool::running_max(query_side, spans, W, 3, false, 0));
      pools.push_back(FusedPool::running_max(query_side, spans, W, 3, true, spans * W));
      return {};
    }
    return operand(torch::cat({flat(cumulative(summary, rows, 3, false)),
                               flat(cumulative(summary, rows, 3, true))},
                              2),
                   x);
  };
  call.ks = both(k, false);
  call.qs = both(q, true);
  // u[(r, c)]: the prefix's pooled query over keys 0..c of row r (causal), and the suffix's over
  // keys c..W-1: the same causal pass with each row of queries and keys read right to left. The
  // passes read prefixes (r, c - 1) for c >= 1 and suffixes (r, c + 1) for c <= W - 2 only.
  const int64_t n = spans * W;
  const auto local_passes = [&](int64_t len) {
    FusedPass prefix, suffix;
    prefix.query = {spans, len, W, 1, 2 * n};
    prefix.key = prefix.value = {spans, len, W, 1, n};
    prefix.mask = suffix.mask = fused::Mask::kCausal;
    suffix.query = {spans, len, W, -1, 2 * n, /*first=*/n + W - 1};
    suffix.key = suffix.value = {spans, len, W, -1, n, /*first=*/W - 1};
    return std::vector<FusedPass>{prefix, suffix};
  };
  // All four pools max pools in the call: each local pass pools q and k along its rows in its
  // own tiles, into the prefix or suffix half of ks (its queries' rows), forward and backward,
  // and no pool kernel makes them. The passes make only what is read: each row's first W - 1
  // prefixes (columns 0..W-2) and last W - 1 suffixes (columns W-1..1), whose keys are the row's
  // first and last W - 1. Row r's whole prefix and whole suffix are neither made nor read, nor
  // their gradients zeroed for the local passes' backward. Where each row is one tile (W <= 64;
  // L 3072 at W 48) the backward also takes the pools' backward; else the pool kernel does,
  // scanning each row's W - 1 steps whose summaries are read (FusedPool::read_steps), from the
  // gradient the passes store of their queries over u's. Other pools: the passes make every row.
  auto local = local_passes(W - 1);
  const auto pooled = [&](bool (*fits)(const FusedPass&, const torch::Tensor&)) {
    return pools.size() == 4 && fits(local[0], q) && fits(local[1], q);
  };
  if (pooled(&pools_fit_on_chip)) {
    const bool backward_on_chip = pooled(&pools_backward_fit_on_chip);
    local[0].pooling(local[0].query);
    local[1].pooling(local[1].query);
    for (auto& p : pools) {
      p.on_chip = true;
      if (!backward_on_chip) p.read_steps = W - 1;
    }
  } else {
    local = local_passes(W);
  }
  call.local = local;
  return call;
}
}  // namespace

torch::Tensor fused_combiner_vertical(const torch::Tensor& q,
                                      const torch::Tensor& k,
                                      const torch::Tensor& v,
                                      const SpanSummary& summary,
                                      int64_t row_len) {
  check_inputs(q, k, v);
  return fused_call(q, k, v, vertical_call(q, k, summary, row_len));
}

torch::Tensor fused_combiner_horizontal(const torch::Tensor& q,
                                        const torch::Tensor& k,
                                        const torch::Tensor& v,
                                        const SpanSummary& summary,
                                        int64_t row_len) {
  check_inputs(q, k, v);
  return fused_call(q, k, v, horizontal_call(q, k, summary, row_len));
}

torch::Tensor fused_combiner_mixture(const torch::Tensor& q,
                                     const torch::Tensor& k,
                                     const torch::Tensor& v,
                                     const SpanSummary& summary,
                                     int64_t row_len) {
  check_inputs(q, k, v);
  return fused_mean(
      q, k, v, vertical_call(q, k, summary, row_len), horizontal_call(q, k, summary, row_len));
}

}  // namespace combiner::attention
