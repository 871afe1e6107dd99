// combiner-fixed's fused plan, and the choice between the fused and the composed path. The
// autograd Function and its checks: function.cpp; the axial variants' plans: fused_axial.cpp.
#include "attention/fused/fused.h"

#include <spdlog/spdlog.h>

#include "attention/attention.h"
#include "attention/span_ops.h"

#include <mutex>
#include <set>

namespace combiner::attention {

namespace {
// The first `spans` whole segments (blocks or rows of `len`) of x [B, H, L, D] as
// [B, H, spans, len, D], in the composition's compute dtype: the summaries are computed as it
// computes them (DeepSets maps, max pools and running means in bfloat16 would flip arg-maxes at
// bfloat16's resolution and lose low bits in long sums) and rounded to the kernels' dtype once,
// as operands. Where x's own dtype gives the same bits (`exact`: plain max pools), x's segments
// themselves: no copy.
torch::Tensor whole_segments(const torch::Tensor& x, int64_t spans, int64_t len, bool exact) {
  auto rows = x.narrow(2, 0, spans * len).reshape({x.size(0), x.size(1), spans, len, x.size(3)});
  return exact ? rows : rows.to(compute_dtype(x));
}
}  // namespace

torch::Tensor span_keys(const torch::Tensor& k,
                        const SpanSummary& summary,
                        int64_t spans,
                        int64_t len) {
  return summary.phi_key(
      whole_segments(k, spans, len, summary.exact_in_input_dtype(/*query_side=*/false)));
}

torch::Tensor span_queries(const torch::Tensor& q,
                           const SpanSummary& summary,
                           int64_t spans,
                           int64_t len) {
  return summary.phi_query(
      whole_segments(q, spans, len, summary.exact_in_input_dtype(/*query_side=*/true)));
}

torch::Tensor span_pool(const torch::Tensor& x,
                        const SpanSummary& summary,
                        bool query_side,
                        int64_t spans,
                        int64_t len) {
  if (summary.exact_in_input_dtype(query_side)) return fused_segment_max(x, spans, len);
  const auto segments =
      query_side ? span_queries(x, summary, spans, len) : span_keys(x, summary, spans, len);
  return summary.pool(segments, 3).to(x.scalar_type());
}

torch::Tensor span_pool_in_call(const torch::Tensor& x,
                                const SpanSummary& summary,
                                bool query_side,
                                int64_t spans,
                                int64_t len,
                                std::vector<FusedPool>& pools) {
  if (!summary.exact_in_input_dtype(query_side))
    return span_pool(x, summary, query_side, spans, len);
  pools.push_back(FusedPool::segment_max(query_side, spans, len));
  return {};
}

std::vector<FusedPass> fixed_joint_passes(int64_t length, int64_t block) {
  const int64_t n = (length + block - 1) / block;
  FusedPass joint;
  joint.query = joint.key = joint.value = {n, block, block, 1, length};
  joint.mask = fused::Mask::kCausal;
  joint.summaries = n > 1;
  return {joint};
}

torch::Tensor fused_combiner_fixed(const torch::Tensor& q,
                                   const torch::Tensor& k,
                                   const torch::Tensor& v,
                                   const SpanSummary& summary,
                                   int64_t block) {
  check_inputs(q, k, v);
  const int64_t L = q.size(2), D = q.size(3), s = block;
  const int64_t spans = (L + s - 1) / s - 1;  // every block but the last is a span
  const double scale = score_scale(D);
  const auto passes = fixed_joint_passes(L, s);
  if (spans == 0) return fused_attention(q, k, v, {}, {}, passes, scale);
  std::vector<FusedPool> pools;
  const auto q_span = span_pool_in_call(q, summary, /*query_side=*/true, spans, s, pools);
  const auto ks = span_pool_in_call(k, summary, /*query_side=*/false, spans, s, pools);
  // u: the pooled query's unmasked softmax over its own block.
  FusedPass local;
  local.query = {spans, 1, 1, 1, spans};
  local.key = local.value = {spans, s, s, 1, spans * s};
  local.mask = fused::Mask::kNone;
  // The local pass makes the blocks' key maxes (from its key tiles; a block of more than one,
  // from k's rows again) and takes their backward (in a block's CTA, or in its dk/dv walk where
  // a block is more than one key tile); and, each block one CTA (s > 32: shorter blocks share
  // tiles), makes its queries, the blocks' query maxes, from the block's rows of q it loads in its
  // query tile (a block of more than one, the rest read from q as they come), and takes their
  // backward in the same CTAs, where the call's dq is stored in the kernel dtype.
  for (auto& p : pools)
    if (key_pool_fits_on_chip(local, q, p) || query_pool_fits_on_chip(local, q, p))
      p.on_chip = true;
  return fused_attention_with_local(q, k, v, ks, q_span, {local}, passes, scale, pools);
}

bool AttentionImpl::use_fused(const std::string& variant,
                              const torch::Tensor& q,
                              const torch::Tensor& v) const {
  if (path_ != Path::kAuto) return path_ == Path::kFused;
  const auto why = fused_cuda_unavailable(q, v);
  log_attention_path(variant, why.empty(), why);
  return why.empty();
}

void log_attention_path(const std::string& variant, bool fused, const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  const std::string line =
      variant + ": " + (fused ? "fused CUDA kernels" : "LibTorch path (" + why + ")");
  std::lock_guard<std::mutex> lock(mutex);
  if (seen.insert(line).second) spdlog::info("attention {}", line);
}

}  // namespace combiner::attention
