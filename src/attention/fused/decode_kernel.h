// One cached decode step of attention in one kernel (the static decoder's,
// attention/static_decode.h): for every (batch, head), write the new position's q, k and v into
// the caches, then, per plan, one softmax over the terms the host listed for this step (cache
// rows attended directly, then span-table slots: pooled keys with their local expectations),
// each with a bias (0, or -inf on the padding), and the weighted sum of their values; with two
// plans (combiner-mixture) the mean of the two outputs. It replaces the op path's cache writes,
// casts, gathers, concatenations, score and value products, bias add and softmax: twelve
// launches a layer.
//
//   score_t = scale * q . key_t + bias_t,   p = softmax(score),   out = sum_t p_t value_t
//
// The caches may be kept in bfloat16, half float32's bytes: the new position's q, k and v are then
// rounded as they are written, its q is rounded for its own scores too, and everything is
// computed in float32 (the span tables, a few rows a layer, stay float32), so a step is attention
// over bfloat16 q, k and v, as training under bfloat16 autocast feeds it.
//
// The step position and the lists are read on the device, so a captured step replays with new
// contents of the same buffers. Two implementations read these descriptors: a CPU model
// (decode_cpu.cpp: plain loops, float32 over float32 or bfloat16 caches, and float64; tests, and
// the CPU's static decoder) and the CUDA kernel (decode_kernel.cu, float32 over float32 or
// bfloat16 caches; CUDA builds). One CTA per (batch, head), 8 warps, each taking 4 terms at a
// time: their rows' loads all issued before any sum (a step is a few hundred scattered 1 KB rows:
// latency, not arithmetic), lanes over D for the scores and over Dv for the values, then the
// warps' partial sums added in shared memory.
#pragma once

#include <cstdint>

#include "attention/fused/kernel.h"

namespace combiner::attention::fused {

constexpr int kDecodeWarps = 8;
constexpr int kDecodeTermsInFlight = 4;      // terms a warp reads before it sums any
constexpr int64_t kDecodeMaxDim = 256;       // lanes hold q's D / 32 values
constexpr int64_t kDecodeMaxValueDim = 256;  // and Dv / 32 running sums
constexpr int kDecodeMaxPlans = 2;

// A plan's terms for this step: `direct_count` rows of the kv cache (their positions in
// `direct`), then `span_count` rows of its span table (their slots in `slots`); `bias` has one
// entry per term, direct ones first.
struct DecodePlan {
  const int64_t* direct = nullptr;
  int64_t direct_count = 0;
  const int64_t* slots = nullptr;
  int64_t span_count = 0;
  const float* bias = nullptr;
  const void* spans = nullptr;  // [B, H, span_rows, D + Dv] contiguous: pooled key, expectation
  int64_t span_rows = 0;
};

// q, k: [B, H, D] and v: [B, H, Dv] (strides in elements, the last axis contiguous) of the
// position *position; the caches are contiguous, q_cache [B, H, length, D] (null when no plan
// pools queries) and kv_cache [B, H, length, D + Dv] (key, then value, in one row); out
// [B, H, Dv] contiguous. q, k, v, out and the span tables in `dtype`: float32, or float64 (CPU
// model only); the caches in `cache`: `dtype`, or bfloat16 beside float32.
struct DecodeStep {
  int64_t batch = 0, heads = 0, dim = 0, value_dim = 0, length = 0;
  double scale = 1;
  Dtype dtype = Dtype::kFloat32;
  Dtype cache = Dtype::kFloat32;
  const int64_t* position = nullptr;
  Operand q, k, v;  // `row` unused
  void* q_cache = nullptr;
  void* kv_cache = nullptr;
  int plans = 1;
  DecodePlan plan[kDecodeMaxPlans];
  void* out = nullptr;
};

COMBINER_HD int64_t decode_terms(const DecodeStep& s) {
  int64_t n = 0;
  for (int p = 0; p < s.plans; ++p) {
    const int64_t t = s.plan[p].direct_count + s.plan[p].span_count;
    n = t > n ? t : n;
  }
  return n;
}
// ---- index rules (CPU model and CUDA kernel) ----

// Term t of a plan as one int: its cache position (>= 0), or -1 - its span slot.
COMBINER_HD int decode_row_code(const DecodePlan& plan, int64_t t) {
  return t < plan.direct_count ? int(plan.direct[t]) : -1 - int(plan.slots[t - plan.direct_count]);
}
// The row a code names, in (b, h)'s kv cache (elements C) or in its part of the plan's span
// table (S): one of the two pointers is set. Rows are `width` = D + Dv long.
template <typename C, typename S>
struct DecodeRow {
  const C* cache;
  const S* span;
};
template <typename C, typename S>
COMBINER_HD DecodeRow<C, S> decode_row(int code, const C* kv_cache, const S* spans, int64_t width) {
  if (code >= 0) return {kv_cache + int64_t(code) * width, nullptr};
  return {nullptr, spans + int64_t(-1 - code) * width};
}
// The warp that takes term t: terms go out kDecodeTermsInFlight at a time, warp by warp.
COMBINER_HD int decode_warp_of(int64_t t) {
  return int(t / kDecodeTermsInFlight % kDecodeWarps);
}

// Shared memory of the CUDA kernel: the warps' value sums [8 x Dv], and per term of the widest
// plan its score and its row (a cache position, or -1 - a span slot), and the block reductions'
// 2 x 8 floats.
COMBINER_HD int64_t decode_smem_bytes(const DecodeStep& s) {
  return 4 * (kDecodeWarps * s.value_dim + 2 * decode_terms(s) + 2 * kDecodeWarps);
}
constexpr int64_t kDecodeMaxSmem = 200 * 1024;  // under the 227 KB an H100 CTA may ask for

// Whether arithmetic in `dtype` over caches of `cache` is one the decode kernels' CPU models take:
// float32 or float64 throughout, or float32 over bfloat16 caches (the span summaries' too).
COMBINER_HD bool cached_dtypes_supported(Dtype dtype, Dtype cache) {
  return cache == dtype ? dtype != Dtype::kBFloat16
                        : dtype == Dtype::kFloat32 && cache == Dtype::kBFloat16;
}
COMBINER_HD bool decode_dtypes_supported(const DecodeStep& s) {
  return cached_dtypes_supported(s.dtype, s.cache);
}

// ---- the CPU model (decode_cpu.cpp) ----
void decode_step_cpu(const DecodeStep& s);

// ---- the CUDA kernel (decode_kernel.cu; CUDA builds only): float32 over float32 or bfloat16
// caches, D and Dv <= 256, shared memory within kDecodeMaxSmem (a plan of up to ~24k terms at
// Dv 128). `stream` is a cudaStream_t.
void decode_step_cuda(const DecodeStep& s, void* stream);

}  // namespace combiner::attention::fused
