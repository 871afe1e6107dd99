// The static decoder's span summaries in one kernel (attention/static_decode.h): before the step
// that first reads them, a row's or block's spans become rows of the span table, each
//
//   key   = pool_{j valid} k_j                       (max, or mean over the valid positions)
//   query = pool_{j valid} q_j, or q at the span's query position (rowmajor's)
//   value = sum_j softmax_j(scale * query . k_j) v_j  (over the valid positions)
//
// read from the caches ([B, H, L, D] of q, [B, H, L, D + Dv] of k and v) at the positions the
// host listed, each span padded to the job's longest with a `valid` flag. It replaces the op
// path's gathers, pools, products, softmax, concatenation and table write: ten launches a layer
// at each row start of combiner-axial-vertical (tests/tools/decode_count_test.cpp), outside the
// captured step. Plain abstractions only (max and mean): a DeepSets map is a matmul, left to
// the ops.
//
// Two implementations read this descriptor: a CPU model (decode_summary_cpu.cpp: plain loops,
// float32 over float32 or bfloat16 caches, and float64) and the CUDA kernel
// (decode_summary_kernel.cu: float32; CUDA builds). One CTA per (span, batch x head), 4 warps:
// threads over D for the pools and the values, warps over the positions for the scores.
#pragma once

#include <cstdint>

#include "attention/fused/decode_kernel.h"
#include "attention/fused/kernel.h"

namespace combiner::attention::fused {

constexpr int kSummaryWarps = 4;
// Shared memory of the CUDA kernel (summary_smem_bytes) kept under the 48 KB a launch gets
// without raising its limit: spans of up to a few thousand positions.
constexpr int64_t kSummaryMaxSmem = 48 * 1024;

struct DecodeSummaries {
  int64_t batch = 0, heads = 0, dim = 0, value_dim = 0, length = 0;
  double scale = 1;
  bool max = true;                     // the pool: max, else mean
  Dtype dtype = Dtype::kFloat32;       // the table's and the arithmetic's: float32, or float64
  Dtype cache = Dtype::kFloat32;       // the caches': `dtype`, or bfloat16 beside float32
  const void* q_cache = nullptr;       // [B, H, length, D]: pooled queries (unused with queries)
  const void* kv_cache = nullptr;      // [B, H, length, D + Dv]
  int64_t spans = 0, span_len = 0;     // G spans of n listed positions each
  const int64_t* positions = nullptr;  // [G, n]
  const bool* valid = nullptr;         // [G, n], or null: every position valid
  const int64_t* queries = nullptr;    // [G]: the local query's position, or null: pooled
  const int64_t* slots = nullptr;      // [G]: the table row each span's summary goes to
  void* table = nullptr;               // [B, H, table_rows, D + Dv] contiguous
  int64_t table_rows = 0;
};

// ---- index rules (CPU model and CUDA kernel) ----

// Position j of span g: its cache row, or -1 where the padding is.
COMBINER_HD int64_t summary_position(const DecodeSummaries& s, int64_t g, int64_t j) {
  const int64_t at = g * s.span_len + j;
  return s.valid == nullptr || s.valid[at] ? s.positions[at] : -1;
}

// Shared memory of the CUDA kernel: per position its row (int64) and its score; the key and the
// query (D floats each); the block reductions' 2 x 4 floats.
COMBINER_HD int64_t summary_smem_bytes(const DecodeSummaries& s) {
  return (8 + 4) * s.span_len + 4 * (2 * s.dim + 2 * kSummaryWarps);
}

// Whether the dtypes are ones the CPU model takes (decode_kernel.h's rule).
COMBINER_HD bool summary_dtypes_supported(const DecodeSummaries& s) {
  return cached_dtypes_supported(s.dtype, s.cache);
}

// ---- the CPU model (decode_summary_cpu.cpp) ----
void decode_summaries_cpu(const DecodeSummaries& s);

// ---- the CUDA kernel (decode_summary_kernel.cu; CUDA builds only): float32 over float32 or
// bfloat16 caches, shared memory within kSummaryMaxSmem. `stream` is a cudaStream_t.
void decode_summaries_cuda(const DecodeSummaries& s, void* stream);

}  // namespace combiner::attention::fused
