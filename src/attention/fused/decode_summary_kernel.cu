// The span-summary kernel (decode_summary.h), the CPU model's loops (decode_summary_cpu.cpp)
// over one CTA per (span g, batch x head), 4 warps:
//   rows:    span g's listed positions in shared memory (summary_position: -1 on the padding);
//   pools:   thread d pools element d of the valid rows' keys, and of their queries (or reads
//            the span's query position), in position order: coalesced rows, one pass each;
//            the key goes to the table row at once;
//   scores:  warp w takes positions w, w + 4, ...; its lanes read the key row D / 32 apart and
//            shuffle-sum the dot product with the query; lane 0 stores scale * dot (-inf on the
//            padding);
//   softmax: the block's max and sum of exp(score - max), the weights kept over the scores;
//   values:  thread d sums weight x value[d] over the valid rows, divided by the sum.
// A CTA reads its span's rows of k twice (pool, scores: the second from L1 or L2), of q and v
// once. At the 128-layer preset's shape (64 images, 2 heads, D 128, W 96, float32 caches) the
// row start of row r reads r rows of each column, 1.5 KB a row from memory: up to 585 MB a
// layer at the last row, 9.4 GB a layer over the 31 row starts, 1.2 TB for 128 layers: ~0.25 s
// of a 64-image sample at an H200's ~4.8 TB/s (half with bfloat16 caches). The ops read the
// same rows, and write and read them again as gathered copies, in ten launches a layer.

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/fused/decode_summary.h"
#include "attention/fused/kernel_launch.cuh"
#include "attention/fused/kernel_reduce.cuh"
#include "simt/cuda.h"

namespace combiner::attention::fused {

namespace {

constexpr int kThreads = kSummaryWarps * 32;

__device__ __forceinline__ float summary_float(float x) {
  return x;
}
__device__ __forceinline__ float summary_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename C>
__global__ void __launch_bounds__(kThreads) decode_summary_kernel(const DecodeSummaries s) {
  COMBINER_DYNAMIC_SHARED(float, smem);
  const int64_t D = s.dim, Dv = s.value_dim, L = s.length, width = D + Dv, n = s.span_len;
  const int64_t g = blockIdx.x, bh = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  auto* rows = reinterpret_cast<int64_t*>(smem);       // [n]
  float* scores = reinterpret_cast<float*>(rows + n);  // [n]
  float* key = scores + n;                             // [D]
  float* query = key + D;                              // [D]
  float* slots = query + D;                            // [2 x 4]
  const C* kv = static_cast<const C*>(s.kv_cache) + bh * L * width;
  const C* qc = s.q_cache ? static_cast<const C*>(s.q_cache) + bh * L * D : nullptr;
  float* row = static_cast<float*>(s.table) + (bh * s.table_rows + s.slots[g]) * width;

  for (int64_t j = tid; j < n; j += kThreads) rows[j] = summary_position(s, g, j);
  __syncthreads();
  // Element d of the pool of the valid rows of x (rows `stride` apart).
  auto pool = [&](const C* x, int64_t stride, int64_t d) {
    float acc = s.max ? -INFINITY : 0.f;
    int count = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (rows[j] < 0) continue;
      const float e = summary_float(x[rows[j] * stride + d]);
      acc = s.max ? fmaxf(acc, e) : acc + e;
      ++count;
    }
    return s.max ? acc : acc / float(count);
  };
  for (int64_t d = tid; d < D; d += kThreads) {
    key[d] = pool(kv, width, d);
    query[d] = s.queries ? summary_float(qc[s.queries[g] * D + d]) : pool(qc, D, d);
    row[d] = key[d];
  }
  __syncthreads();

  for (int64_t j = warp; j < n; j += kSummaryWarps) {
    const int64_t r = rows[j];  // the same for the whole warp
    float dot = 0.f;
    if (r >= 0)
      for (int64_t d = lane; d < D; d += 32) dot += query[d] * summary_float(kv[r * width + d]);
    dot = cuda_detail::warp_sum(dot);
    if (lane == 0) scores[j] = r >= 0 ? dot * float(s.scale) : -INFINITY;
  }
  __syncthreads();
  float max = -INFINITY;
  for (int64_t j = tid; j < n; j += kThreads) max = fmaxf(max, scores[j]);
  max = cuda_detail::block_reduce<true, kSummaryWarps>(max, slots);
  float total = 0.f;
  for (int64_t j = tid; j < n; j += kThreads) {
    const float e = rows[j] >= 0 ? expf(scores[j] - max) : 0.f;
    scores[j] = e;
    total += e;
  }
  total = cuda_detail::block_reduce<false, kSummaryWarps>(
      total, slots + kSummaryWarps);  // orders the weights too

  for (int64_t d = tid; d < Dv; d += kThreads) {
    float sum = 0.f;
    for (int64_t j = 0; j < n; ++j)
      if (rows[j] >= 0) sum += scores[j] * summary_float(kv[rows[j] * width + D + d]);
    row[D + d] = sum / total;
  }
}

template <typename C>
void launch_summaries(const DecodeSummaries& s, cudaStream_t stream) {
  const dim3 grid(unsigned(s.spans), unsigned(s.batch * s.heads));
  COMBINER_LAUNCH(grid, kThreads, size_t(summary_smem_bytes(s)), stream, decode_summary_kernel<C>)
  (s);
  cuda_detail::check(cudaGetLastError(), "span summary kernel");
}

}  // namespace

void decode_summaries_cuda(const DecodeSummaries& s, void* stream) {
  if (s.dtype != Dtype::kFloat32 || !summary_dtypes_supported(s) ||
      summary_smem_bytes(s) > kSummaryMaxSmem || s.batch * s.heads > 65535 ||
      s.length > (int64_t(1) << 30))
    throw std::invalid_argument(
        "span summary kernel: float32 (caches float32 or bfloat16), at most 65535 batch x heads "
        "and " +
        std::to_string(kSummaryMaxSmem) + " bytes of shared memory");
  if (s.spans == 0 || s.batch * s.heads == 0) return;
  const auto on = static_cast<cudaStream_t>(stream);
  if (s.cache == Dtype::kBFloat16)
    launch_summaries<__nv_bfloat16>(s, on);
  else
    launch_summaries<float>(s, on);
}

}  // namespace combiner::attention::fused
