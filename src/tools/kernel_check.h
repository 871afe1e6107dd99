// `combiner-bench kernel-check`: every fused kernel against the LibTorch composition and the
// float64 dense reference, outputs and gradients, before anything is timed (as llm.c's kernel
// programs do). On a CUDA device it checks the CUDA kernels (float32, bfloat16); on the CPU the
// kernels' CPU model (float32, float64).
#pragma once

#include <torch/torch.h>

#include "attention/fused/reference.h"

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::attention {

// The variants with fused kernels, which have kernel-check cases.
const std::vector<std::string>& fused_variants();

struct KernelCheckCase {
  std::string variant;       // one of fused_variants()
  std::string abstraction;   // max | mean | deepsets-max | deepsets-mean
  std::string dtype;         // float32 | bfloat16 | float64
  int64_t dim = 64;          // D = Dv
  int64_t length = 0;        // L of the module (a multiple of the row length when axial)
  int64_t input_length = 0;  // L of the inputs: <= length (a prefix: a short last row)
  int64_t layout = 0;        // block s or row length W
  int64_t batch = 2, heads = 2;
};

// A check's error: max |got - want| / max(1, max |want|) over the tensor, in float64 on the CPU
// (0 when both are undefined or empty, infinity when one is undefined or it is not finite).
double check_error(const torch::Tensor& got, const torch::Tensor& want);

// Errors are check_error(fused, expected).
struct KernelCheckResult {
  double out_composed = 0;                    // output vs the LibTorch composition, same dtype
  double out_reference = 0;                   // output vs the float64 dense reference (A v)
  double grad_q = 0, grad_k = 0, grad_v = 0;  // vs the float64 composition (v: vs A^T dO)
  double grad_params = 0;   // DeepSets maps vs the float64 composition (0 without)
  double grad_summary = 0;  // kernel level: d ks, d u of the joint pass vs its reference
  double packed = 0;        // q, k, v as views of one packed projection: output and gradient vs the
                            // fused run on contiguous copies
  double grad_composed = 0;  // the LibTorch composition's own q/k/v/map gradients, same dtype,
                             // vs float64: how well the case is conditioned in this dtype
  double tol_out = 0, tol_grad = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// kSmall: the cases up to L 300 (quick, e.g. under compute-sanitizer); kAll adds L ~1600, where
// the summaries fill two 64-row tiles and their gradients come from several parts.
enum class KernelCheckSizes { kSmall, kAll };

// The grid for a device: CUDA float32 and bfloat16, CPU float32 and float64; every variant;
// D in `dims`; odd L (a short last block, a short last row, blocks and rows longer than a 64-row
// tile, more than 64 segments); the abstractions in turn.
std::vector<KernelCheckCase> kernel_check_cases(const std::string& device,
                                                const std::vector<int64_t>& dims,
                                                KernelCheckSizes sizes = KernelCheckSizes::kAll);

KernelCheckResult run_kernel_check(const KernelCheckCase& c, const std::string& device);

// Before timing a variant on `device` in `dtype` with head dim `dim`: "" when the fused path will
// not run there (CPU, no kernel for the variant, dtype or D) or its kernel-check cases at that
// (dtype, D) pass; else the first failing table line (the bench then refuses to time it).
std::string fused_mismatch(const std::string& variant,
                           const std::string& device,
                           const std::string& dtype,
                           int64_t dim);

// The printed table: one line per case, fixed-width columns.
std::string kernel_check_header();
std::string kernel_check_line(const KernelCheckCase& c, const KernelCheckResult& r);

}  // namespace combiner::attention
