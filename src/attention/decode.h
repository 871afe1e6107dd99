// Incremental decoding for sampling: one position at a time, exactly the output forward() would
// give at that position. Every variant keeps what its own pattern reads: the keys and values of
// positions it attends directly, and each span's summary (pooled key and local expectation),
// computed once when the span is complete. So a step costs the variant's per-position terms
// (O(sqrt L) or O(log L) for the sparse and Combiner layouts), not O(L).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace combiner::attention {

class SpanSummary;

// Per-position q, k, v of one layer, [B, H, L, *] in the compute dtype, filled up to `filled`.
struct DecodeCache {
  torch::Tensor q, k, v;  // q is left undefined by variants that never read past queries
  int64_t filled = 0;

  // Positions [begin, end) of x: [B, H, end - begin, *] (a view).
  static torch::Tensor range(const torch::Tensor& x, int64_t begin, int64_t end);
  // Rows [0, rows) of x seen as rows of `row_len`: [B, H, rows, row_len, *] (a view).
  static torch::Tensor rows(const torch::Tensor& x, int64_t rows, int64_t row_len);
};

// TORCH_CHECKs one position's q, k: [B, H, D] and v: [B, H, Dv]; `who` starts the message.
void check_step_inputs(const torch::Tensor& q,
                       const torch::Tensor& k,
                       const torch::Tensor& v,
                       const char* who);

class DecodeState {
 public:
  virtual ~DecodeState() = default;
  DecodeState(const DecodeState&) = delete;
  DecodeState& operator=(const DecodeState&) = delete;

  // q, k: [B, H, D] and v: [B, H, Dv] of the next position i = 0, 1, ..., L - 1.
  // Returns the attention output at i, [B, H, Dv], in v's dtype.
  torch::Tensor step(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

  int64_t length() const { return length_; }

 protected:
  DecodeState(int64_t length, bool keep_queries) : length_(length), keep_queries_(keep_queries) {}

  // The output at i = cache().filled - 1 for the query q [B, H, D] (compute dtype).
  virtual torch::Tensor attend(int64_t i, const torch::Tensor& q) = 0;
  const DecodeCache& cache() const { return cache_; }

 private:
  int64_t length_;
  bool keep_queries_;
  DecodeCache cache_;
};

// The terms one position attends: parts [B, H, n_t, D] of keys with their values
// [B, H, n_t, Dv], direct positions and span summaries alike.
struct Terms {
  std::vector<torch::Tensor> keys, values;
  void add(torch::Tensor key, torch::Tensor value);
};

// One softmax over every term, as forward() does: q [B, H, D] -> [B, H, Dv].
torch::Tensor attend_terms(const torch::Tensor& q, const Terms& terms);

// A span summarised through its pooled query, along dim -2 of q, k: [..., n, D], v: [..., n, Dv]:
// the pooled key [..., D] and the pooled query's local expectation [..., Dv].
struct SpanTerm {
  torch::Tensor key, value;
};
SpanTerm summarize_span(const SpanSummary& summary,
                        const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v);

// Summaries of finished spans, written once each: keys [B, H, capacity, *], values likewise.
class SpanTable {
 public:
  explicit SpanTable(int64_t capacity) : capacity_(capacity) {}
  void put(int64_t index, const SpanTerm& term);  // term.key [B, H, *], term.value [B, H, *]
  torch::Tensor keys(int64_t count) const { return keys_.narrow(2, 0, count); }
  torch::Tensor values(int64_t count) const { return values_.narrow(2, 0, count); }

 private:
  int64_t capacity_;
  torch::Tensor keys_, values_;
};

// The axial support of i (row length W): its column above and its row up to i.
Terms axial_direct(const DecodeCache& cache, int64_t i, int64_t row_len);

}  // namespace combiner::attention
