// Many float32 tensors rounded to bfloat16 in one launch, each into its place in one buffer:
//
//   out[first[t] + i] = bf16(source_t[i])    for i < numel[t]    (rounded to nearest even)
//   out[first[t] + i] = 0                    up to first[t + 1]   (padding)
//
// A model under bf16 autocast reads its matmul weights this way (ops/weight_cast.h): all of them
// cast once per forward, where autocast casts each weight and each bias where a layer reads it
// (two launches a linear layer, 8 a transformer block). Each copy starts at a multiple of
// kCastVector elements (16 bytes of the buffer), so a thread's kCastVector outputs belong to one
// tensor, which it finds by a binary search of the starts. Two implementations read these
// descriptors: the CPU model (weight_cast_cpu.cpp: plain loops; tests) and the CUDA kernel
// (weight_cast_kernel.cu).
#pragma once

#include <cstdint>

#include "ops/layer_norm_kernel.h"  // COMBINER_OPS_HD

namespace combiner::ops {

constexpr int kCastVector = 8;     // outputs per thread: 16 bytes of bfloat16
constexpr int kCastThreads = 256;  // per CTA

struct WeightCast {
  int64_t tensors = 0;
  int64_t groups = 0;              // the buffer's elements / kCastVector
  const int64_t* table = nullptr;  // [3, tensors]: addresses (float*), first elements, numels
  uint16_t* out = nullptr;         // [groups * kCastVector] bfloat16
};

// Kernels launched on a GPU.
constexpr int kWeightCastLaunches = 1;

// The tensor whose copy holds buffer element e: the last t with first[t] <= e (first[0] = 0).
COMBINER_OPS_HD int64_t cast_tensor_of(const int64_t* first, int64_t tensors, int64_t e) {
  int64_t lo = 0, hi = tensors - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (first[mid] <= e)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

void weight_cast_cpu(const WeightCast& w);
// CUDA builds (and the emulator's); `stream` is a cudaStream_t.
void weight_cast_cuda(const WeightCast& w, void* stream);

}  // namespace combiner::ops
