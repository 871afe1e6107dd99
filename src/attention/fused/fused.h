// The fused path of combiner-fixed and the axial Combiner variants (rowmajor, vertical,
// horizontal; the mixture averages the last two): plain max pools (whole segments, running maxes)
// are made inside the fused call by their own kernels (FusedPool); DeepSets maps and means stay
// LibTorch ops with their autograd; every softmax over keys runs in the fused kernels of
// fused/kernel.h through one autograd Function (forward saves o and the per-query log-sum-exp;
// backward recomputes the weights). CUDA tensors run the CUDA kernels, CPU tensors the CPU model
// of the same kernels (tests, kernel-check).
#pragma once

#include <torch/torch.h>

#include "attention/fused/kernel.h"
#include "attention/summary.h"

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::attention {

// One pass of the fused core: its geometry, whether source A reads (k, v) or the summary slots
// (ks, u), and source B (fused/kernel_pass.h Pass), which reads (ks, u) in the same softmax: by
// prefix (rows r < g) or, `by_segment`, through its own geometries and mask, a second source like A
// (the axial variants' spans beside their row or column).
struct FusedPass {
  fused::Geometry query, key, value;
  fused::Mask mask = fused::Mask::kCausal;
  bool summaries = false;         // source B = (ks, u)
  bool a_from_summaries = false;  // source A = (ks, u) instead of (k, v)
  bool by_segment = false;        // source B by segment, else by prefix
  fused::Geometry summary_key, summary_value;
  fused::Mask summary_mask = fused::Mask::kNone;
  // A local pass that makes the call's cumulative max pools itself (fused/kernel_pass.h
  // Pass::pooled, pools_on_chip): its queries are the running max of q's rows `pooled_query` (the
  // rows its keys are, in k) down each segment, pooled in its tiles, `query` naming their rows of
  // qs (and of u); it writes its keys' running max into ks's rows `pooled_keys`. Its two pools are
  // FusedPool::on_chip.
  bool pooled = false;
  fused::Geometry pooled_query, pooled_keys;

  // Makes this pass pooled: queries from q's rows of its keys, keys' running max at the rows
  // of ks that `keys_at` names.
  FusedPass& pooling(const fused::Geometry& keys_at) {
    pooled = true;
    pooled_query = key;
    pooled_keys = keys_at;
    return *this;
  }

  // Source B by segment: key j of segment g at row row_of(key, g, j) of ks, its value at
  // row_of(value, g, j) of u, masked by `m`.
  FusedPass& with_spans(const fused::Geometry& key, const fused::Geometry& value, fused::Mask m) {
    summaries = by_segment = true;
    summary_key = key;
    summary_value = value;
    summary_mask = m;
    return *this;
  }
};

// A max pool the fused call makes itself, from the first `segments` x `len` rows of k (into ks)
// or of q (into qs), written from row `first` of its slot: a plain max over each segment
// (SegmentMax: `segments` rows) or a running max (RunningMax: `segments` x `len` rows) along dim 2
// of [B, H, segments, len, D] (down the segments) or 3 (along each), from the end when `reverse`.
// Its backward adds into the gradient of k or q in place, after the passes: no gradient tensor
// of its own, no sum of two, no zeroed tail.
struct FusedPool {
  enum class Kind : int { kSegmentMax, kRunningMax };
  Kind kind = Kind::kSegmentMax;
  bool query_side = false;
  int64_t segments = 0, len = 1;
  int64_t dim = 2;  // kRunningMax
  bool reverse = false;
  int64_t first = 0;
  // Made in the forward by the local pass that reads it (FusedPass::pooled), not by a scan: a
  // query side's slot then exists only in that pass's tiles, forward and backward. Its backward
  // is any pool's. A key
  // side's segment max: made by the local pass over its keys (key_pool_fits_on_chip), which also
  // takes its backward where it can (fused::Backward::key_pool).
  bool on_chip = false;
  // A running max whose rows are read only at each line's first `read_steps` steps, in its scan
  // order (0: every step): its backward's scans run over those steps alone, reading nothing of
  // the gradient's other rows (which need not be zeros).
  int64_t read_steps = 0;

  int64_t rows() const { return kind == Kind::kSegmentMax ? segments : segments * len; }
  // The steps of each running max line: len along a segment (dim 3), else segments.
  int64_t steps() const { return dim == 3 ? len : segments; }

  static FusedPool segment_max(bool query_side, int64_t segments, int64_t len) {
    FusedPool p;
    p.query_side = query_side;
    p.segments = segments;
    p.len = len;
    return p;
  }
  static FusedPool running_max(
      bool query_side, int64_t segments, int64_t len, int64_t dim, bool reverse, int64_t first) {
    FusedPool p = segment_max(query_side, segments, len);
    p.kind = Kind::kRunningMax;
    p.dim = dim;
    p.reverse = reverse;
    p.first = first;
    return p;
  }
};

// One fused call over given q, k, v, planned: the slots it is given (ks, u, qs; undefined where
// it reads none or its pools make them), its local passes (none: fused_attention's call, else
// fused_attention_with_local's), its joint passes and pools, and the score scale.
struct FusedCall {
  torch::Tensor ks, u, qs;
  std::vector<FusedPass> local, passes;
  std::vector<FusedPool> pools;
  double scale = 1;
};
// o of one call, as fused_attention or fused_attention_with_local give it.
torch::Tensor fused_call(const torch::Tensor& q,
                         const torch::Tensor& k,
                         const torch::Tensor& v,
                         const FusedCall& call);
// (o of a + o of b) / 2, both over q, k, v, in one autograd node (combiner-mixture's average),
// stored by b's last pass where it writes every row of o alone: no average launch, no tensor of
// b's own o. Its backward runs a's backward, then b's adding its parts of the gradients of q, k
// and v into a's in place, both taking d_o / 2 where they write their gradients; no sum of two
// gradients, no second set of them, no halved copy of d_o.
torch::Tensor fused_mean(const torch::Tensor& q,
                         const torch::Tensor& k,
                         const torch::Tensor& v,
                         const FusedCall& a,
                         const FusedCall& b);

// o [B, H, Lq, D] = the passes run in order over q [B, H, Lq, D], k, v [B, H, Lk, D] and
// optional ks [B, H, Ls, D], u [B, H, Lu, D] (undefined when no pass reads them); the first pass
// writes every query row, later ones merge by log-sum-exp. Differentiable in every input. The
// kernels compute in q's dtype (the others are cast to it) with Acc accumulation.
torch::Tensor fused_attention(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v,
                              const torch::Tensor& ks,
                              const torch::Tensor& u,
                              const std::vector<FusedPass>& passes,
                              double scale);

// The same in one call that also makes u: the `local` passes run first over the summary queries
// qs [B, H, Lu, D] (undefined: q itself, Lu = Lq) against k and v, each storing its own rows of
// u [B, H, Lu, D] (no row twice; rows no local query writes are zeros; masks as in any pass, no
// summaries); then `passes` read that u. One autograd node: its backward runs the joint passes,
// then the local ones with u's gradient, adding the local passes' parts of dk, dv (and dq) into the
// joint ones in place, with no separate gradient tensors for the local stage's k and v.
// `pools`: where ks (or qs) is undefined, the max pools that make it in the call (each row of the
// slot written by one pool; the query-side pools make qs, the others ks).
torch::Tensor fused_attention_with_local(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         const torch::Tensor& ks,
                                         const torch::Tensor& qs,
                                         const std::vector<FusedPass>& local,
                                         const std::vector<FusedPass>& passes,
                                         double scale,
                                         const std::vector<FusedPool>& pools = {});

// Whether `local` can make the running max pools down its segments on chip for these queries
// (fused/kernel_plan.h pools_on_chip, at q's dtype and head dim): then it may be FusedPass::pooled,
// with a running max of k and one of q along dim 2, from row 0, over its keys' rows.
bool pools_fit_on_chip(const FusedPass& local, const torch::Tensor& q);
// Whether its backward can also take the pools' backward in its epilogue (fused/kernel_plan.h
// pools_backward_on_chip: one CTA per segment); else the pool kernel takes it, from the gradient
// of its pooled queries that the pass stores.
bool pools_backward_fit_on_chip(const FusedPass& local, const torch::Tensor& q);
// Whether `local` can make a key-side segment max pool over its keys' segments in its own CTAs
// (fused/kernel_plan.h key_pool_on_chip, at q's dtype and head dim): then the pool may be
// FusedPool::on_chip (rowmajor's row maxes, fixed's block maxes).
bool key_pool_fits_on_chip(const FusedPass& local, const torch::Tensor& q, const FusedPool& pool);
// Whether it can also take that pool's backward in its own CTAs (key_pool_backward_on_chip: a
// segment's CTA at rows and blocks of at most 64, the dk/dv walk's key tile CTAs at longer ones;
// wherever it makes the pool); else the pool kernel's backward runs.
bool key_pool_backward_fits_on_chip(const FusedPass& local,
                                    const torch::Tensor& q,
                                    const FusedPool& pool);
// Whether `local` can make a query-side segment max pool over q's segments as its own queries
// in its CTAs, writing them to the qs slot it reads them from (fused/kernel_plan.h
// query_pool_on_chip): then the pool may be FusedPool::on_chip (fixed's pooled queries at blocks
// of more than 32). Its backward runs in the same pass's query CTAs where the call's dq is stored
// in the kernel dtype (fused/kernel_plan.h query_pool_backward_fits); else the pool kernel's.
bool query_pool_fits_on_chip(const FusedPass& local, const torch::Tensor& q, const FusedPool& pool);

// The joint passes of each variant over L = `length`, merged by log-sum-exp. n = ceil(L / W)
// rows, spans = n - 1 (every block / row but the last).
//   fixed: one pass; ks [B, H, spans, D] one pooled key per block, u [B, H, spans, D].
//   rowmajor: the row pass, then the per-column pass over the earlier rows' summaries;
//     ks [B, H, spans, D] one pooled key per row, u [B, H, spans * W, D] (u[(r, c)] for query
//     column c).
//   vertical: the row pass with the spans (rows R >= 1, columns c != c') as its source B, the
//     column pass; ks, u [B, H, spans * W, D]: [(r, c)] = column c's rows 0..r (cumulative
//     pooled key, local expectation).
//   horizontal: the row pass, the suffix pass (per column, rows r < R), the column pass with the
//     prefixes (rows r < R) as its source B; ks, u [B, H, 2 * spans * W, D]: rows
//     0..spans*W-1 hold [(r, c)] = row r's columns 0..c, the next spans*W its columns c..W-1.
std::vector<FusedPass> fixed_joint_passes(int64_t length, int64_t block);
std::vector<FusedPass> rowmajor_joint_passes(int64_t length, int64_t row_len);
std::vector<FusedPass> vertical_joint_passes(int64_t length, int64_t row_len);
std::vector<FusedPass> horizontal_joint_passes(int64_t length, int64_t row_len);

// The first `spans` whole segments (blocks or rows of `len`) of k or q [B, H, L, D] through the
// side's DeepSets map, as [B, H, spans, len, D], ready to pool: in the composition's compute
// dtype, or in k's / q's own where that gives the same bits (SpanSummary::exact_in_input_dtype).
torch::Tensor span_keys(const torch::Tensor& k,
                        const SpanSummary& summary,
                        int64_t spans,
                        int64_t len);
torch::Tensor span_queries(const torch::Tensor& q,
                           const SpanSummary& summary,
                           int64_t spans,
                           int64_t len);

// Each of the first `spans` whole segments of `len` rows of x (q when `query_side`, else k)
// summarised: [B, H, spans, D] in x's dtype. A plain max pool is fused_segment_max; the others
// (DeepSets maps, means) pool span_queries / span_keys as LibTorch ops.
torch::Tensor span_pool(const torch::Tensor& x,
                        const SpanSummary& summary,
                        bool query_side,
                        int64_t spans,
                        int64_t len);

// The same for a fused call: a plain max pool is added to `pools` (the call makes it, and its
// backward adds into k's or q's gradient in place) and the result is undefined; any other
// summary is span_pool's tensor.
torch::Tensor span_pool_in_call(const torch::Tensor& x,
                                const SpanSummary& summary,
                                bool query_side,
                                int64_t spans,
                                int64_t len,
                                std::vector<FusedPool>& pools);

// The variants through the fused core. q, k, v: [B, H, L, D] (any L; D = Dv) -> [B, H, L, D].
torch::Tensor fused_combiner_fixed(const torch::Tensor& q,
                                   const torch::Tensor& k,
                                   const torch::Tensor& v,
                                   const SpanSummary& summary,
                                   int64_t block);
torch::Tensor fused_combiner_rowmajor(const torch::Tensor& q,
                                      const torch::Tensor& k,
                                      const torch::Tensor& v,
                                      const SpanSummary& summary,
                                      int64_t row_len);
torch::Tensor fused_combiner_vertical(const torch::Tensor& q,
                                      const torch::Tensor& k,
                                      const torch::Tensor& v,
                                      const SpanSummary& summary,
                                      int64_t row_len);
torch::Tensor fused_combiner_horizontal(const torch::Tensor& q,
                                        const torch::Tensor& k,
                                        const torch::Tensor& v,
                                        const SpanSummary& summary,
                                        int64_t row_len);
// The mean of vertical and horizontal (fused_mean: one autograd node).
torch::Tensor fused_combiner_mixture(const torch::Tensor& q,
                                     const torch::Tensor& k,
                                     const torch::Tensor& v,
                                     const SpanSummary& summary,
                                     int64_t row_len);

// The inclusive running max of x along `dim` (from the end when `reverse`), differentiable: the
// cumulative_max of summary.h in one kernel each way (fused/kernel_scan.h RunningMax) on CUDA and
// the CPU model, for float32 and bfloat16 (and float64 on the CPU); other dtypes take
// cumulative_max.
torch::Tensor fused_running_max(const torch::Tensor& x, int64_t dim, bool reverse);
// The same of the first `segments` whole segments of `len` rows of x [B, H, rows, D], viewed as
// [B, H, segments, len, D], along dim 2 (down the segments) or 3 (along each): that view's
// running max, contiguous, whose backward writes x's whole gradient (rows past the segments
// zero) rather than a slice's.
torch::Tensor fused_running_max_of_segments(
    const torch::Tensor& x, int64_t segments, int64_t len, int64_t dim, bool reverse);

// The max over each of the first `segments` whole segments of `len` rows of x [B, H, rows, D]:
// [B, H, segments, D], differentiable (the plain max pools of combiner-fixed and rowmajor: a
// kernel each way whose backward writes x's whole gradient, fused/kernel_pass.h SegmentMax; float32
// and bfloat16, and float64 on the CPU; other dtypes take LibTorch's pool).
torch::Tensor fused_segment_max(const torch::Tensor& x, int64_t segments, int64_t len);

// Fused kernels launched by this process so far (on a GPU; on the CPU, those the kernels' CPU
// model stands in for): what combiner-bench --count adds to the LibTorch ops of the glue.
int64_t fused_kernel_launches();

// Why the CUDA kernels cannot take these inputs ("" when they can): not CUDA, dtype other than
// float32/bfloat16, D != Dv or D not in {32, 64, 128}, a build without the kernels, B*H > 65535.
std::string fused_cuda_unavailable(const torch::Tensor& q, const torch::Tensor& v);

// Logs, once per process and variant, which path forward() runs and why.
void log_attention_path(const std::string& variant, bool fused, const std::string& why);

}  // namespace combiner::attention
