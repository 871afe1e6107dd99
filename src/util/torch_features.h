// Which LibTorch 2 fast paths this build compiles: at::scaled_dot_product_attention for `full`
// and at::_fused_adamw_ for the update (LibTorch >= 2.0), and foreach ops that take a tensor
// scalar (>= 2.1). They run on CUDA tensors only; the CPU keeps the paths Debian's LibTorch 1.13
// runs. CMake's COMBINER_TORCH2_PATHS=OFF (defining COMBINER_NO_TORCH2_PATHS) compiles them out:
// a way to still build and measure if a newer LibTorch changes one of their signatures.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2 && !defined(COMBINER_NO_TORCH2_PATHS)
#define COMBINER_TORCH2_PATHS 1
#else
#define COMBINER_TORCH2_PATHS 0
#endif

#if COMBINER_TORCH2_PATHS && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1)
#define COMBINER_TORCH2_1_PATHS 1
#else
#define COMBINER_TORCH2_1_PATHS 0
#endif

// at::_fused_adamw_ with the learning rate as a tensor and a skip flag (found_inf), on the CPU as
// on CUDA (LibTorch >= 2.4): the update of a step captured as a CUDA graph, which the CPU runs
// uncaptured in the tests (train/device_adamw.h).
#if COMBINER_TORCH2_PATHS && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 4)
#define COMBINER_TORCH2_4_PATHS 1
#else
#define COMBINER_TORCH2_4_PATHS 0
#endif

// at::mm with an output dtype: float32 sums of bfloat16 operands written as they are, one cuBLAS
// GEMM (LibTorch >= 2.8; CUDA only): the linear layers' weight gradients (ops/linear.cpp).
#if COMBINER_TORCH2_PATHS && (TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 8)
#define COMBINER_TORCH2_8_PATHS 1
#else
#define COMBINER_TORCH2_8_PATHS 0
#endif
