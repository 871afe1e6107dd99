// Scores and softmax in the compute dtype (fp32 for half/bf16 inputs); the mask is built per call.
// On CUDA with LibTorch >= 2 the forward is at::scaled_dot_product_attention (flash or
// memory-efficient kernels: the scores never reach device memory); the CPU keeps the dense path
// unless the fused path is asked for (set_path(kFused)).
#include "attention/full.h"

#include <spdlog/spdlog.h>

#include <atomic>

#include "attention/decode.h"
#include "attention/span_ops.h"
#include "util/torch_features.h"

#include <cmath>

namespace combiner::attention {

namespace full_detail {

// Says once per process which path `full` runs, the first time each one runs.
void log_path(bool sdpa, const torch::Tensor& q) {
  static std::atomic<bool> logged_sdpa{false}, logged_dense{false};
  if ((sdpa ? logged_sdpa : logged_dense).exchange(true)) return;
  if (sdpa)
    spdlog::info("attention full on {}: at::scaled_dot_product_attention, causal ({} inputs)",
                 q.device().str(),
                 c10::toString(q.scalar_type()));
  else
    spdlog::info("attention full on {}: dense masked softmax in {}",
                 q.device().str(),
                 c10::toString(compute_dtype(q)));
}

}  // namespace full_detail

torch::Tensor FullAttentionImpl::forward(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v) {
  check_inputs(q, k, v);
#if COMBINER_TORCH2_PATHS
  // If SDPA refuses its inputs (a check before any kernel), the dense path runs, with a warning.
  static std::atomic<bool> sdpa_refused{false};
  // kAuto takes it on CUDA; kFused on any device (the CPU then runs SDPA's CPU kernel, and
  // counts what a GPU launches), kComposed never.
  const bool wanted = path() == Path::kFused || (path() == Path::kAuto && q.is_cuda());
  if (!sdpa_refused && wanted && q.scalar_type() == k.scalar_type() &&
      q.scalar_type() == v.scalar_type()) {
    full_detail::log_path(true, q);
    try {
      // Its default scale is score_scale(D) = 1 / sqrt(D).
      return at::scaled_dot_product_attention(q, k, v, {}, /*dropout_p=*/0.0, /*is_causal=*/true);
    } catch (const c10::OutOfMemoryError&) {
      throw;  // out of memory is no refusal: the other path needs more
    } catch (const c10::Error& e) {
      sdpa_refused = true;
      const std::string what = e.what();
      spdlog::warn("attention full: scaled_dot_product_attention refused ({}); dense path instead",
                   what.substr(0, what.find('\n')));
    }
  }
#endif
  full_detail::log_path(false, q);
  const auto dtype = compute_dtype(q);
  const int64_t L = q.size(2);
  const double scale = score_scale(q.size(3));
  auto scores = torch::matmul(q.to(dtype), k.to(dtype).transpose(-2, -1)) * scale;
  scores = masked(scores, causal_allowed(L, /*strict=*/false, q.device()));
  return torch::matmul(torch::softmax(scores, -1), v.to(dtype)).to(v.scalar_type());
}

namespace {
// Every earlier key and value: O(i) per step, as full attention is.
class FullDecode : public DecodeState {
 public:
  explicit FullDecode(int64_t length) : DecodeState(length, /*keep_queries=*/false) {}

 private:
  torch::Tensor attend(int64_t i, const torch::Tensor& q) override {
    Terms terms;
    terms.add(DecodeCache::range(cache().k, 0, i + 1), DecodeCache::range(cache().v, 0, i + 1));
    return attend_terms(q, terms);
  }
};
}  // namespace

std::unique_ptr<DecodeState> FullAttentionImpl::start_decoding(int64_t length) const {
  return std::make_unique<FullDecode>(length);
}

}  // namespace combiner::attention
