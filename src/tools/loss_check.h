// kernel-check's loss table: the fused loss (ops/cross_entropy.h; the CUDA kernels on a GPU, their
// CPU model on the CPU) against LibTorch's log_softmax in float64 on the same logits (as rounded
// to their dtype): each row's bits, or their mean, and the logits' gradient.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::tools {

struct LossCheckCase {
  int64_t rows = 0, vocab = 0;
  std::string dtype;  // float32 | bfloat16: the logits'
  bool mean = false;  // the training loss (else each row's bits)
};

// Errors are max |fused - expected| / max(1, max |expected|) over the tensor; the mean's
// gradient is taken for an upstream gradient of `rows`, so that its elements are of order one.
struct LossCheckResult {
  double bits = 0, dlogits = 0;
  double tol = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// The 256 values of a subpixel, a vocabulary of one lane's columns or fewer and one not a
// multiple of the warp; one row, rows past a CTA's 8 and (`large`) a CIFAR-10 batch of 32 images
// of 3072 subpixels; both dtypes, both reductions.
std::vector<LossCheckCase> loss_check_cases(bool large);

LossCheckResult run_loss_check(const LossCheckCase& c, const std::string& device);

std::string loss_check_header();
std::string loss_check_line(const LossCheckCase& c, const LossCheckResult& r);

}  // namespace combiner::tools
