#include "attention/decode.h"

#include "attention/span_ops.h"
#include "attention/summary.h"

namespace combiner::attention {

torch::Tensor DecodeCache::range(const torch::Tensor& x, int64_t begin, int64_t end) {
  return x.narrow(2, begin, end - begin);
}

torch::Tensor DecodeCache::rows(const torch::Tensor& x, int64_t rows, int64_t row_len) {
  return x.narrow(2, 0, rows * row_len).view({x.size(0), x.size(1), rows, row_len, x.size(3)});
}

void check_step_inputs(const torch::Tensor& q,
                       const torch::Tensor& k,
                       const torch::Tensor& v,
                       const char* who) {
  TORCH_CHECK(q.dim() == 3 && k.sizes() == q.sizes() && v.dim() == 3 &&
                  v.sizes().slice(0, 2) == q.sizes().slice(0, 2),
              who,
              ": expected q, k [B, H, D] and v [B, H, Dv], got q ",
              q.sizes(),
              ", k ",
              k.sizes(),
              ", v ",
              v.sizes());
}

torch::Tensor DecodeState::step(const torch::Tensor& q,
                                const torch::Tensor& k,
                                const torch::Tensor& v) {
  check_step_inputs(q, k, v, "decode");
  TORCH_CHECK(cache_.filled < length_, "decode: all ", length_, " positions already taken");
  const auto dtype = compute_dtype(q);
  if (cache_.filled == 0) {
    auto make = [&](const torch::Tensor& x) {
      return torch::empty({x.size(0), x.size(1), length_, x.size(2)}, x.options().dtype(dtype));
    };
    if (keep_queries_) cache_.q = make(q);
    cache_.k = make(k);
    cache_.v = make(v);
  }
  const int64_t i = cache_.filled++;
  if (keep_queries_) cache_.q.select(2, i).copy_(q);
  cache_.k.select(2, i).copy_(k);
  cache_.v.select(2, i).copy_(v);
  return attend(i, q.to(dtype)).to(v.scalar_type());
}

void Terms::add(torch::Tensor key, torch::Tensor value) {
  keys.push_back(std::move(key));
  values.push_back(std::move(value));
}

torch::Tensor attend_terms(const torch::Tensor& q, const Terms& terms) {
  auto keys = terms.keys.size() == 1 ? terms.keys[0] : torch::cat(terms.keys, 2);
  auto values = terms.values.size() == 1 ? terms.values[0] : torch::cat(terms.values, 2);
  auto scores = torch::matmul(keys, q.unsqueeze(-1)).squeeze(-1) * score_scale(q.size(-1));
  auto weights = torch::softmax(scores, -1);  // [B, H, n]
  return torch::matmul(weights.unsqueeze(2), values).squeeze(2);
}

SpanTerm summarize_span(const SpanSummary& summary,
                        const torch::Tensor& q,
                        const torch::Tensor& k,
                        const torch::Tensor& v) {
  auto key = summary.pool(summary.phi_key(k), -2);
  auto query = summary.pool(summary.phi_query(q), -2);
  auto local = torch::softmax(
      torch::matmul(query.unsqueeze(-2), k.transpose(-2, -1)) * score_scale(q.size(-1)), -1);
  return {key, torch::matmul(local, v).squeeze(-2)};
}

void SpanTable::put(int64_t index, const SpanTerm& term) {
  auto allocate = [&](const torch::Tensor& x) {
    auto shape = x.sizes().vec();
    shape.insert(shape.begin() + 2, capacity_);
    return torch::empty(shape, x.options());
  };
  if (!keys_.defined()) {
    keys_ = allocate(term.key);
    values_ = allocate(term.value);
  }
  keys_.select(2, index).copy_(term.key);
  values_.select(2, index).copy_(term.value);
}

Terms axial_direct(const DecodeCache& cache, int64_t i, int64_t row_len) {
  const int64_t row = i / row_len, col = i % row_len;
  Terms terms;
  if (row > 0)
    terms.add(DecodeCache::rows(cache.k, row, row_len).select(3, col),
              DecodeCache::rows(cache.v, row, row_len).select(3, col));
  terms.add(DecodeCache::range(cache.k, row * row_len, i + 1),
            DecodeCache::range(cache.v, row * row_len, i + 1));
  return terms;
}

}  // namespace combiner::attention
