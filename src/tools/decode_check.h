// kernel-check's decode table: the static decoder's attention step (attention/static_decode.h)
// on its fused path (the decode kernel on a GPU, its CPU model on the CPU) against the same
// decoder's LibTorch ops on the same device, and against forward() in float64 on the CPU, at
// every position of a sequence: the cache writes, the listed terms, the spans' slots and the
// softmax all show in the outputs, and so do the span summaries, which the fused path makes with
// its own kernel (fused/decode_summary.h) for the plain abstractions. With bfloat16 caches the reference is forward() of q, k and v
// rounded to bfloat16 (what the step computes over).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::tools {

struct DecodeCheckCase {
  std::string variant, abstraction;
  int64_t length = 0, layout = 0;  // L, and the block s or row length W (0: none)
  int64_t dim = 32;                // D = Dv
  int64_t batch = 2, heads = 2;
  bool bfloat16_cache = false;
};

// Errors are max |fused - expected| / max(1, max |expected|) over every position's output.
struct DecodeCheckResult {
  double composed = 0;   // vs the LibTorch ops of the same decoder, float32, same device
  double reference = 0;  // vs forward() in float64 on the CPU, from the same float32 inputs
  double tol = 0;
  bool pass = false;
  std::string detail;  // an exception's message, when the case could not run
};

// Every variant with its first abstraction and every abstraction of combiner-axial-vertical, at
// L 48 and at a length with a short last row, and every variant again at L 48 with bfloat16
// caches; with `large`, the 128-layer preset's shape (L 3072, W 96, D 128) for the axial
// Combiners and `full`, and vertical there with bfloat16 caches.
std::vector<DecodeCheckCase> decode_check_cases(bool large);

DecodeCheckResult run_decode_check(const DecodeCheckCase& c, const std::string& device);

std::string decode_check_header();
std::string decode_check_line(const DecodeCheckCase& c, const DecodeCheckResult& r);

}  // namespace combiner::tools
