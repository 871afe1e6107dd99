// The attention interface every variant implements, and the one factory that builds them.
// Shape letters used across src/attention: B batch, H heads, L sequence length,
// D query/key dim, Dv value dim. All variants are causal: output i sees positions 0..i.
#pragma once

#include <torch/torch.h>

#include "attention/options.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace combiner::attention {

class DecodeState;  // attention/decode.h
class SpanSummary;  // attention/summary.h

// Every variant name the factory accepts, in documentation order.
const std::vector<std::string>& variant_names();
const std::vector<std::string>& abstraction_names();

// Whether a variant reads `block` (the fixed layouts) or `row_len` (the axial layouts).
bool uses_block(const std::string& type);
bool uses_row_len(const std::string& type);

// Throws std::invalid_argument naming the key (model.attention.*) and what is allowed, e.g. an
// unknown type or a row_len that does not divide `length`. `block` and `row_len` must be resolved
// (non-zero) before this is called; each is checked only for the variants that use it.
void validate(const AttentionOptions& options, int64_t length);

// One causal attention operator over already-projected heads. Parameter-free for most variants;
// the DeepSets abstractions own small learned maps, registered here so checkpoints carry them.
class AttentionImpl : public torch::nn::Module {
 public:
  // q, k: [B, H, L, D]; v: [B, H, L, Dv]. Returns [B, H, L, Dv].
  virtual torch::Tensor forward(const torch::Tensor& q,
                                const torch::Tensor& k,
                                const torch::Tensor& v) = 0;

  // A fresh incremental decoder over sequences of `length` positions (sampling): its step(i)
  // equals forward()'s output at i. It reads this module's learned maps, so it must not
  // outlive the module.
  virtual std::unique_ptr<DecodeState> start_decoding(int64_t length) const = 0;

  // The Combiner variants' span summaries (pooling and DeepSets maps), for decoders built from
  // the plan (attention/static_decode.h); null for variants without spans.
  virtual const SpanSummary* span_summary() const { return nullptr; }

  // Which implementation forward() runs, for the variants with fused kernels (attention/fused/fused.h,
  // has_fused_kernel()): kAuto takes them for CUDA inputs they support and the LibTorch
  // composition otherwise; kComposed and kFused force one (tests, kernel-check; kFused on CPU
  // tensors runs the kernels' CPU model). Other variants ignore it.
  enum class Path { kAuto, kComposed, kFused };
  void set_path(Path path) { path_ = path; }
  Path path() const { return path_; }
  virtual bool has_fused_kernel() const { return false; }

 protected:
  // Whether forward() takes the fused path for these inputs; logs the choice once per process.
  bool use_fused(const std::string& variant, const torch::Tensor& q, const torch::Tensor& v) const;

 private:
  Path path_ = Path::kAuto;
};

// The single place that maps a variant name to a concrete class. `length` is L, `head_dim` is D.
std::shared_ptr<AttentionImpl> make_attention(const AttentionOptions& options,
                                              int64_t length,
                                              int64_t head_dim);

}  // namespace combiner::attention
