// Incremental decoding with the same tensor shapes and addresses at every step, so that a whole
// model's step can be captured once as a CUDA graph and replayed (model/static_decoder.h). The
// per-variant decoders of decode.h read exactly the terms of step i, whose count changes with i;
// here the variant's plan (plan.h) is turned, on the host, into fixed-width lists: the cache
// positions step i attends directly and the span-table slots of the spans it reads, padded to the
// plan's widest step, with a -inf bias on the padding. The device work of a step then only
// gathers by those lists (index_select), so nothing in it depends on i but buffer contents.
//
// A span's summary (pooled key, local expectation) is made once, eagerly and outside the
// captured step, before the first step that reads it; its slot is reused once the last step
// reading it is done. The spans of a row or block are summarised in one batched call (a row's W
// column spans, say; DecodeSchedule). So per step the host writes a few hundred integers, and
// the summaries come once per row or block, as the per-variant decoders' do.
#pragma once

#include <torch/torch.h>

#include "attention/attention.h"
#include "attention/fused/decode_kernel.h"
#include "attention/options.h"
#include "attention/plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace combiner::attention {

class SpanSummary;

// Spans summarised together before one step, padded to the longest with a mask.
struct SpanJob {
  torch::Tensor slots;            // [G] int64: where each summary goes in the span table
  torch::Tensor positions;        // [G, n] int64: each span's positions, padded with its first
  torch::Tensor valid;            // [G, n] bool, undefined when every span has n positions
  torch::Tensor query_positions;  // [G] int64 where the local query is q at a position
                                  // (rowmajor), undefined where it is the pooled query
};

// One plan of a variant (plan_names()) over `length` positions, stepped on the host. Made once
// from the whole plan: each span's slot, and the step before which its summary is made: its
// first reader's, or earlier, with others of the same kind of query, when its positions are all
// there already and its first reader comes within the plan's period (a block, a row): so a
// row's W spans are made in one call, not one each step.
class DecodeSchedule {
 public:
  DecodeSchedule(const std::string& plan_name, int64_t length, int64_t block, int64_t row_len);

  int64_t direct_width() const { return direct_width_; }  // widest direct set of any step
  int64_t span_width() const { return span_width_; }      // most spans read by any step
  int64_t span_slots() const { return span_slots_; }      // most spans alive at once

  // Step i (0, 1, ... in order): writes its direct positions into direct[0, direct_width), its
  // span slots into slots[0, span_width) and 0 or -inf into bias[0, direct_width + span_width);
  // returns the summaries to make before the step (on `device`).
  std::vector<SpanJob> advance(
      int64_t i, int64_t* direct, int64_t* slots, float* bias, const torch::Device& device);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // first, last, count, query
  std::string plan_name_;
  int64_t length_, block_, row_len_;
  int64_t direct_width_ = 0, span_width_ = 0, span_slots_ = 0;
  int64_t next_step_ = 0;
  std::map<Key, int64_t> slot_;                 // every span's slot
  std::vector<std::vector<Span>> made_before_;  // per step: the spans to summarise first
};

// Every plan of a variant and the device buffers one step reads, shared by a model's layers.
// The buffers keep their addresses for the decoder's life; prepare(i) rewrites their contents.
class StaticDecodeInputs {
 public:
  StaticDecodeInputs(const AttentionOptions& options, int64_t length, const torch::Device& device);

  // Writes step i's position, lists and biases to the device (one copy each); returns, per
  // plan, the span summaries every layer makes before the step.
  std::vector<std::vector<SpanJob>> prepare(int64_t i);

  int64_t length() const { return length_; }
  size_t plans() const { return schedules_.size(); }
  const DecodeSchedule& schedule(size_t p) const { return schedules_[p]; }
  const torch::Tensor& position() const { return position_; }         // [1] int64
  const torch::Tensor& direct(size_t p) const { return direct_[p]; }  // [direct_width] int64
  const torch::Tensor& slots(size_t p) const { return slots_[p]; }    // [span_width] int64
  const torch::Tensor& bias(size_t p) const { return bias_[p]; }      // [direct + span width] float

 private:
  int64_t length_;
  std::vector<DecodeSchedule> schedules_;
  torch::Tensor host_ints_, host_bias_;      // staging on the host (pinned for a GPU)
  torch::Tensor device_ints_, device_bias_;  // position, then each plan's direct and slots
  torch::Tensor position_;
  std::vector<torch::Tensor> direct_, slots_, bias_;
};

// How a StaticDecodeLayer steps and keeps its caches (below).
struct StaticDecodeOptions {
  AttentionImpl::Path path = AttentionImpl::Path::kAuto;
  bool bfloat16_cache = false;
  // A job's spans are gathered a few at a time, each call's copy of their q, k, v held under
  // `gather_bytes` (at least one span per call): horizontal's 2W row parts padded to W
  // positions would otherwise copy O(W^2) rows at once.
  int64_t gather_bytes = int64_t(256) << 20;
};

// One layer's cache and span tables. `summary` is the module's (null for variants without
// spans) and must outlive this. On the fused path a job's summaries are one kernel
// (fused/decode_summary.h: its CPU model elsewhere) for the plain abstractions; the ops make
// them otherwise.
//
// A step runs as one fused call (fused/decode_kernel.h: the cache writes, gathers, softmax and
// weighted sums in one kernel on a GPU, its CPU model elsewhere) or as LibTorch ops, the
// reference: `path` as the attention module's (kAuto: the kernel on CUDA where it applies, the
// ops elsewhere; kFused: the kernel or its CPU model, an error where it cannot take the step;
// kComposed: the ops).
//
// The caches are kept in the compute dtype (float32 for float32 and bfloat16 inputs, float64 for
// float64), or in bfloat16 (`bfloat16_cache`, float32 inputs): half the bytes, the new
// position's q, k and v rounded as they are written (its q for its own scores too), everything
// computed in float32, on either path: attention over the rounded q, k and v. The span tables
// (a few rows) stay in the compute dtype.
class StaticDecodeLayer {
 public:
  using Path = AttentionImpl::Path;
  using Options = StaticDecodeOptions;
  explicit StaticDecodeLayer(const SpanSummary* summary, Options options = {})
      : summary_(summary), options_(options) {}

  // Makes the summaries prepare() asked for, from what the cache holds (eager work).
  void summarize(const std::vector<std::vector<SpanJob>>& jobs);

  // q, k: [B, H, D], v: [B, H, Dv] of position inputs.position() -> [B, H, Dv] in v's dtype:
  // device work of the same shapes at every step. The first call allocates the cache.
  torch::Tensor step(const torch::Tensor& q,
                     const torch::Tensor& k,
                     const torch::Tensor& v,
                     const StaticDecodeInputs& inputs);

 private:
  // Keys and values side by side in one row, [.., D + Dv], so that one gather reads both.
  torch::Tensor keys(const torch::Tensor& kv) const { return kv.narrow(-1, 0, key_dim_); }
  torch::Tensor values(const torch::Tensor& kv) const {
    return kv.narrow(-1, key_dim_, kv.size(-1) - key_dim_);
  }

  void summarize(size_t plan, const SpanJob& job);
  // Makes a job's summaries in one fused call (fused/decode_summary.h) where the path is fused
  // and the kernel takes them; false where it leaves them to the ops (a DeepSets map, a dtype, a
  // build without the CUDA kernels).
  bool summarize_fused(size_t plan, const SpanJob& job);
  // The fused call's descriptor of this step, all but its output (at most kDecodeMaxPlans
  // plans: fused_unsupported says when there are more).
  fused::DecodeStep fused_step(const torch::Tensor& q,
                               const torch::Tensor& k,
                               const torch::Tensor& v,
                               const StaticDecodeInputs& inputs) const;
  // Why the fused call cannot take this step, described by `step` (empty when it can).
  std::string fused_unsupported(const torch::Tensor& q,
                                const torch::Tensor& k,
                                const torch::Tensor& v,
                                const StaticDecodeInputs& inputs,
                                const fused::DecodeStep& step) const;
  // The fused call of `step`, on `on`'s device, its output [B, H, Dv] in v's dtype.
  torch::Tensor step_fused(const torch::Tensor& on, const torch::Tensor& v, fused::DecodeStep step);
  torch::Tensor step_composed(const torch::Tensor& q,
                              const torch::Tensor& k,
                              const torch::Tensor& v,
                              const StaticDecodeInputs& inputs);

  // The caches' dtype for inputs like q; the step's query as the cache holds it.
  torch::ScalarType cache_dtype(const torch::Tensor& q) const;
  torch::Tensor as_cached(const torch::Tensor& q) const;

  const SpanSummary* summary_;
  Options options_;
  int64_t key_dim_ = 0;
  torch::Tensor q_;                   // [B, H, L, D] in cache_dtype(), for the span summaries
  torch::Tensor kv_;                  // [B, H, L, D + Dv]
  std::vector<torch::Tensor> spans_;  // per plan: [B, H, slots, D + Dv] (pooled key, expectation),
                                      // in the compute dtype
};

}  // namespace combiner::attention
