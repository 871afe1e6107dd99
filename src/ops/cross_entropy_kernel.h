// The training loss, bits per subpixel, in one pass each way over the head's logits, without
// torch. Row r of the logits z [rows, V] scores the V values of subpixel r, whose value is t_r:
//
//   forward:  m = max_c z[r, c], s = sum_c exp(z[r, c] - m),
//             bits[r] = ((m - z[r, t_r]) + log(s)) * log2(e)     (LibTorch's log_softmax order)
//             lse[r] = m + log(s)                                 (kept for the backward)
//   backward: dz[r, c] = g_r * log2(e) * (exp(z[r, c] - lse) - [c == t_r])
//
// where g_r is the gradient of bits[r] (one value for every row where the loss is their mean:
// stride 0, scaled by 1 / rows). LibTorch's log_softmax, gather (or nll_loss) and their
// backward write the normalised [rows, V] log-probabilities, keep them for backward and write
// a zero-filled gradient of the same size before the softmax's: these write the row's bits and
// lse and, backward, the logits' gradient alone. A target outside [0, V) gives a NaN for its
// row's bits and gradient (what the trainer's non-finite skip catches), not a read out of the
// row.
//
// Two implementations read these descriptors: the CPU model (cross_entropy_cpu.cpp: plain loops
// in the kernels' order, the warp's shuffles included; tests) and the CUDA kernels
// (cross_entropy_kernel.cu). A warp owns a row: lane l takes columns l, l + 32, ... (each load of
// the warp 32 neighbouring values), its sum of exponentials in that order, then the warp's
// butterfly (lane l adds lane l ^ o's sum, o = 16, 8, 4, 2, 1).
#pragma once

#include <cstdint>

#include "ops/layer_norm_kernel.h"  // Dtype, COMBINER_OPS_HD

namespace combiner::ops {

constexpr int kEntropyWarps = 8;  // rows in flight per CTA, a warp each
constexpr float kLog2e = 1.44269504088896340736f;

enum class TargetType : int { kUInt8, kInt64 };

struct EntropyForward {
  int64_t rows = 0, vocab = 0;
  const void* logits = nullptr;  // [rows, vocab] in dtype, contiguous
  Dtype dtype = Dtype::kFloat32;
  const void* targets = nullptr;  // [rows] in target_type
  TargetType target_type = TargetType::kInt64;
  float* bits = nullptr;  // [rows]
  float* lse = nullptr;   // [rows], for the backward
};

struct EntropyBackward {
  int64_t rows = 0, vocab = 0;
  const void* logits = nullptr;  // as the forward's
  Dtype dtype = Dtype::kFloat32;
  const void* targets = nullptr;
  TargetType target_type = TargetType::kInt64;
  const float* lse = nullptr;  // the forward's
  // g_r = grad[r * grad_stride] * grad_scale: read on the device (a captured step's gradient
  // changes between replays, its address does not).
  const float* grad = nullptr;
  int64_t grad_stride = 1;
  float grad_scale = 1.f;
  void* dlogits = nullptr;  // [rows, vocab] in dtype
};

// Kernels each launches on a GPU.
constexpr int kEntropyForwardLaunches = 1;
constexpr int kEntropyBackwardLaunches = 1;

// Row r's target as an index, or -1 where it lies outside [0, vocab).
COMBINER_OPS_HD int64_t entropy_target(const void* targets,
                                       TargetType type,
                                       int64_t r,
                                       int64_t vocab) {
  const int64_t t = type == TargetType::kUInt8 ? int64_t(static_cast<const uint8_t*>(targets)[r])
                                               : static_cast<const int64_t*>(targets)[r];
  return t >= 0 && t < vocab ? t : -1;
}

void entropy_forward_cpu(const EntropyForward& f);
void entropy_backward_cpu(const EntropyBackward& b);
// CUDA builds (and the emulator's); `stream` is a cudaStream_t.
void entropy_forward_cuda(const EntropyForward& f, void* stream);
void entropy_backward_cuda(const EntropyBackward& b, void* stream);

}  // namespace combiner::ops
