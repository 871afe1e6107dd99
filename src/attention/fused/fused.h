// The fused path of combiner-fixed and combiner-axial-rowmajor: span summaries (DeepSets maps,
// max/mean pooling) stay LibTorch ops with their autograd; every softmax over keys runs in the
// fused kernels of fused/kernel.h through one autograd Function (forward saves o and the
// per-query log-sum-exp; backward recomputes the weights). CUDA tensors run the CUDA kernels,
// CPU tensors the CPU model of the same kernels (tests, kernel-check).
#pragma once

#include <torch/torch.h>

#include "attention/fused/kernel.h"
#include "attention/summary.h"

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::attention {

// One pass of the fused core: its geometry, and whether source A reads (k, v) or the summary
// slots (ks, u) (rowmajor's per-column pass).
struct FusedPass {
  fused::Geometry query, key, value;
  fused::Mask mask = fused::Mask::kCausal;
  bool summaries = false;         // source B = (ks, u), rows r < g
  bool a_from_summaries = false;  // source A = (ks, u) instead of (k, v)
};

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

// The joint passes of each variant over L = `length` (rowmajor: the row pass, then the
// per-column pass over the earlier rows' summaries, merged by log-sum-exp). ks [B, H, spans, D]
// holds one pooled key per span (block / row but the last); u the span values: fixed
// [B, H, spans, D], rowmajor [B, H, spans * W, D] (u[(r, c)] for query column c).
std::vector<FusedPass> fixed_joint_passes(int64_t length, int64_t block);
std::vector<FusedPass> rowmajor_joint_passes(int64_t length, int64_t row_len);

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

// Why the CUDA kernels cannot take these inputs ("" when they can): not CUDA, dtype other than
// float32/bfloat16, D != Dv or D not in {32, 64, 128}, a build without the kernels, B*H > 65535.
std::string fused_cuda_unavailable(const torch::Tensor& q, const torch::Tensor& v);

// Logs, once per process and variant, which path forward() runs and why.
void log_attention_path(const std::string& variant, bool fused, const std::string& why);

}  // namespace combiner::attention
