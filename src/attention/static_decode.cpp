#include "attention/static_decode.h"

#include "attention/attention.h"
#include "attention/decode.h"
#include "attention/fused/launch.h"
#include "attention/plan.h"
#include "attention/span_ops.h"
#include "attention/summary.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace combiner::attention {

namespace {
std::tuple<int64_t, int64_t, int64_t, int64_t> key_of(const Span& span) {
  // A plan's span is a run of positions at one stride (a block, a row part, a column prefix), so
  // its ends and its count name it; the query position tells rowmajor's W readings apart.
  return {span.positions.front(),
          span.positions.back(),
          int64_t(span.positions.size()),
          span.query_position};
}

fused::Dtype fused_dtype(torch::ScalarType t) {
  return t == torch::kDouble     ? fused::Dtype::kFloat64
         : t == torch::kBFloat16 ? fused::Dtype::kBFloat16
                                 : fused::Dtype::kFloat32;
}

torch::Tensor int64_tensor(const std::vector<int64_t>& values,
                           int64_t rows,
                           const torch::Device& d) {
  auto out = torch::tensor(values, torch::kLong);
  return out.view({rows, int64_t(values.size()) / rows}).to(d);
}
}  // namespace

DecodeSchedule::DecodeSchedule(const std::string& plan_name,
                               int64_t length,
                               int64_t block,
                               int64_t row_len)
    : plan_name_(plan_name), length_(length), block_(block), row_len_(row_len) {
  // Each span's last reader, and the span itself.
  struct Reads {
    int64_t last = 0;
    Span span;
  };
  std::map<Key, Reads> reads;
  std::vector<std::vector<Key>> first_read(length);
  for (int64_t i = 0; i < length; ++i) {
    const auto plan = plan_position(plan_name, i, length, block, row_len);
    direct_width_ = std::max(direct_width_, int64_t(plan.direct.size()));
    span_width_ = std::max(span_width_, int64_t(plan.spans.size()));
    for (const auto& span : plan.spans) {
      const auto key = key_of(span);
      auto [at, fresh] = reads.try_emplace(key, Reads{i, span});
      at->second.last = i;
      if (fresh) first_read[i].push_back(key);
    }
  }
  // When each is made: at its first reader, or with an earlier batch of the same query kind
  // when it is complete by then and first read within one period of it.
  const int64_t period = uses_row_len(plan_name) ? row_len : uses_block(plan_name) ? block : 1;
  made_before_.assign(length, {});
  std::map<Key, int64_t> made_at;
  for (int64_t i = 0; i < length; ++i) {
    if (first_read[i].empty()) continue;
    for (const auto& key : first_read[i]) made_at.try_emplace(key, i);
    for (int64_t j = i + 1; j < std::min(length, i + period); ++j)
      for (const auto& key : first_read[j])
        if (reads.at(key).span.positions.back() < i) made_at.try_emplace(key, i);
  }
  // Slots: taken when made, free after the last read (its summary is then overwritten only by
  // work queued after that step's).
  std::vector<std::vector<Key>> made(length), done(length);
  for (const auto& [key, step] : made_at) {
    made[step].push_back(key);
    done[reads.at(key).last].push_back(key);
  }
  std::vector<int64_t> free_slots;
  for (int64_t i = 0; i < length; ++i) {
    for (const auto& key : made[i]) {
      if (free_slots.empty()) free_slots.push_back(span_slots_++);
      slot_[key] = free_slots.back();
      free_slots.pop_back();
      made_before_[i].push_back(reads.at(key).span);
    }
    for (const auto& key : done[i]) free_slots.push_back(slot_.at(key));
  }
}

std::vector<SpanJob> DecodeSchedule::advance(
    int64_t i, int64_t* direct, int64_t* slots, float* bias, const torch::Device& device) {
  TORCH_CHECK(i == next_step_, "decode schedule: expected step ", next_step_, ", got ", i);
  ++next_step_;
  const auto plan = plan_position(plan_name_, i, length_, block_, row_len_);
  const float masked = -std::numeric_limits<float>::infinity();
  // Padding reads position i (in the cache by then) and slot 0, both finite, under -inf.
  for (int64_t t = 0; t < direct_width_; ++t) {
    const bool real = t < int64_t(plan.direct.size());
    direct[t] = real ? plan.direct[t] : i;
    bias[t] = real ? 0.0f : masked;
  }
  for (int64_t t = 0; t < span_width_; ++t) {
    const bool real = t < int64_t(plan.spans.size());
    slots[t] = real ? slot_.at(key_of(plan.spans[t])) : 0;
    bias[direct_width_ + t] = real ? 0.0f : masked;
  }
  // The summaries to make first, one job per kind of local query.
  std::vector<SpanJob> jobs;
  for (const bool at_position : {false, true}) {
    std::vector<const Span*> spans;
    size_t n = 0;
    bool ragged = false;
    for (const auto& span : made_before_[i])
      if ((span.query_position >= 0) == at_position) {
        if (!spans.empty() && span.positions.size() != n) ragged = true;
        n = std::max(n, span.positions.size());
        spans.push_back(&span);
      }
    if (spans.empty()) continue;
    const int64_t count = int64_t(spans.size());
    std::vector<int64_t> slot, positions, queries;
    std::vector<int64_t> valid;
    for (const auto* span : spans) {
      slot.push_back(slot_.at(key_of(*span)));
      queries.push_back(span->query_position);
      for (size_t t = 0; t < n; ++t) {
        const bool real = t < span->positions.size();
        positions.push_back(real ? span->positions[t] : span->positions.front());
        valid.push_back(real);
      }
    }
    SpanJob job;
    job.slots = int64_tensor(slot, 1, device).view({count});
    job.positions = int64_tensor(positions, count, device);
    if (ragged)
      job.valid =
          torch::tensor(valid, torch::kLong).to(torch::kBool).view({count, int64_t(n)}).to(device);
    if (at_position) job.query_positions = int64_tensor(queries, 1, device).view({count});
    jobs.push_back(std::move(job));
  }
  return jobs;
}

StaticDecodeInputs::StaticDecodeInputs(const AttentionOptions& options,
                                       int64_t length,
                                       const torch::Device& device)
    : length_(length) {
  // The ints: the position, then per plan its direct list and its slots; the biases: per plan,
  // one per entry of those two lists, so a plan's biases start one before its lists do.
  int64_t floats = 0;
  for (const auto& name : plan_names(options.type)) {
    schedules_.emplace_back(name, length, options.block, options.row_len);
    floats += schedules_.back().direct_width() + schedules_.back().span_width();
  }
  const int64_t ints = 1 + floats;
  const auto pinned = torch::TensorOptions().pinned_memory(device.is_cuda());
  host_ints_ = torch::zeros({ints}, pinned.dtype(torch::kLong));
  host_bias_ = torch::zeros({floats}, pinned.dtype(torch::kFloat));
  device_ints_ = torch::zeros({ints}, torch::dtype(torch::kLong).device(device));
  device_bias_ = torch::zeros({floats}, torch::dtype(torch::kFloat).device(device));
  position_ = device_ints_.narrow(0, 0, 1);
  int64_t at = 0;
  for (const auto& s : schedules_) {
    direct_.push_back(device_ints_.narrow(0, 1 + at, s.direct_width()));
    slots_.push_back(device_ints_.narrow(0, 1 + at + s.direct_width(), s.span_width()));
    bias_.push_back(device_bias_.narrow(0, at, s.direct_width() + s.span_width()));
    at += s.direct_width() + s.span_width();
  }
}

std::vector<std::vector<SpanJob>> StaticDecodeInputs::prepare(int64_t i) {
  auto* ints = host_ints_.data_ptr<int64_t>();
  auto* bias = host_bias_.data_ptr<float>();
  ints[0] = i;
  int64_t at = 0;
  std::vector<std::vector<SpanJob>> jobs;
  for (auto& s : schedules_) {
    jobs.push_back(s.advance(
        i, ints + 1 + at, ints + 1 + at + s.direct_width(), bias + at, device_ints_.device()));
    at += s.direct_width() + s.span_width();
  }
  // Blocking copies: the next step's host writes must not race a copy still queued.
  device_ints_.copy_(host_ints_);
  device_bias_.copy_(host_bias_);
  return jobs;
}

void StaticDecodeLayer::summarize(const std::vector<std::vector<SpanJob>>& jobs) {
  for (size_t p = 0; p < jobs.size(); ++p)
    for (const auto& job : jobs[p]) {
      TORCH_CHECK(summary_ != nullptr && kv_.defined(),
                  "static decode: span summaries asked of a layer without them or before its "
                  "first step");
      if (summarize_fused(p, job)) continue;
      const int64_t G = job.positions.size(0), n = job.positions.size(1);
      // Gathered rows, and their float32 copy where the caches are bfloat16.
      const int64_t element = kv_.scalar_type() == torch::kBFloat16 ? 2 + 4 : kv_.element_size();
      const int64_t row_bytes = kv_.size(0) * kv_.size(1) * (kv_.size(3) + q_.size(3)) * element;
      const int64_t per_call = std::max<int64_t>(1, options_.gather_bytes / (row_bytes * n));
      for (int64_t g0 = 0; g0 < G; g0 += per_call) {
        const int64_t count = std::min(per_call, G - g0);
        auto part = [&](const torch::Tensor& x) {
          return x.defined() ? x.narrow(0, g0, count) : x;
        };
        summarize(
            p, {part(job.slots), part(job.positions), part(job.valid), part(job.query_positions)});
      }
    }
}

void StaticDecodeLayer::summarize(size_t p, const SpanJob& job) {
  const int64_t B = kv_.size(0), H = kv_.size(1), G = job.positions.size(0),
                n = job.positions.size(1);
  const auto dtype = kv_.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  auto gather = [&](const torch::Tensor& x) {
    return x.index_select(2, job.positions.flatten()).view({B, H, G, n, x.size(3)}).to(dtype);
  };
  // Pools over each span's own positions: padding out of the max, or out of the mean's sum
  // and count.
  const auto valid = job.valid.defined() ? job.valid.unsqueeze(-1) : torch::Tensor();
  auto pool = [&](const torch::Tensor& x) {
    if (!valid.defined()) return summary_->pool(x, 3);
    if (summary_->is_max()) return summary_->pool(x.masked_fill(valid.logical_not(), -INFINITY), 3);
    return (x * valid).sum(3) / valid.sum(1).to(x.scalar_type());
  };
  const auto kv = gather(kv_);
  const auto k = keys(kv);
  auto key = pool(summary_->phi_key(k));  // [B, H, G, D]
  auto query = job.query_positions.defined() ? q_.index_select(2, job.query_positions).to(dtype)
                                             : pool(summary_->phi_query(gather(q_)));
  auto scores = torch::matmul(query.unsqueeze(3), k.transpose(-2, -1)) * score_scale(k.size(-1));
  if (job.valid.defined())
    scores = scores.masked_fill(job.valid.logical_not().unsqueeze(1), -INFINITY);
  auto local = torch::softmax(scores, -1);  // [B, H, G, 1, n]
  auto value = torch::matmul(local, values(kv)).squeeze(3);
  spans_[p].index_copy_(2, job.slots, torch::cat({key, value}, -1));
}

bool StaticDecodeLayer::summarize_fused(size_t p, const SpanJob& job) {
  const auto path = options_.path;
  if (!(path == Path::kFused || (path == Path::kAuto && kv_.is_cuda())) || !summary_->plain())
    return false;
  fused::DecodeSummaries s;
  s.batch = kv_.size(0);
  s.heads = kv_.size(1);
  s.dim = key_dim_;
  s.value_dim = kv_.size(3) - key_dim_;
  s.length = kv_.size(2);
  s.scale = score_scale(key_dim_);
  s.max = summary_->is_max();
  s.dtype = fused_dtype(spans_[p].scalar_type());
  s.cache = fused_dtype(kv_.scalar_type());
  s.spans = job.positions.size(0);
  s.span_len = job.positions.size(1);
  if (!fused::summary_dtypes_supported(s)) return false;
  if (kv_.is_cuda()) {
#ifdef COMBINER_WITH_CUDA_KERNELS
    if (s.dtype != fused::Dtype::kFloat32 || fused::summary_smem_bytes(s) > fused::kSummaryMaxSmem)
      return false;
#else
    return false;
#endif
  }
  const auto positions = job.positions.contiguous(), slots = job.slots.contiguous();
  const auto valid = job.valid.defined() ? job.valid.contiguous() : torch::Tensor();
  const auto queries =
      job.query_positions.defined() ? job.query_positions.contiguous() : torch::Tensor();
  s.q_cache = q_.data_ptr();
  s.kv_cache = kv_.data_ptr();
  s.positions = positions.data_ptr<int64_t>();
  s.valid = valid.defined() ? valid.data_ptr<bool>() : nullptr;
  s.queries = queries.defined() ? queries.data_ptr<int64_t>() : nullptr;
  s.slots = slots.data_ptr<int64_t>();
  s.table = spans_[p].data_ptr();
  s.table_rows = spans_[p].size(2);
  fused_launch::decode_summaries(kv_, s);
  return true;
}

torch::Tensor StaticDecodeLayer::step(const torch::Tensor& q,
                                      const torch::Tensor& k,
                                      const torch::Tensor& v,
                                      const StaticDecodeInputs& inputs) {
  check_step_inputs(q, k, v, "static decode");
  if (!kv_.defined()) {
    const int64_t B = q.size(0), H = q.size(1), L = inputs.length();
    key_dim_ = k.size(2);
    auto zeros = [&](int64_t n, int64_t d) {
      return torch::zeros({B, H, n, d}, q.options().dtype(cache_dtype(q)));
    };
    bool spans = false;
    for (size_t p = 0; p < inputs.plans(); ++p) {
      const int64_t slots = inputs.schedule(p).span_slots();
      spans = spans || slots > 0;
      // Zeros, not garbage: padding reads slot 0 under a -inf bias, and 0 x NaN would not vanish.
      // In the compute dtype: a few rows, made in it.
      spans_.push_back(torch::zeros({B, H, std::max<int64_t>(slots, 1), k.size(2) + v.size(2)},
                                    q.options().dtype(compute_dtype(q))));
    }
    if (spans) q_ = zeros(L, q.size(2));
    kv_ = zeros(L, k.size(2) + v.size(2));
  }
  const auto path = options_.path;
  const bool fused = path == Path::kFused || (path == Path::kAuto && q.is_cuda());
  if (fused) {
    const auto call = fused_step(q, k, v, inputs);
    const auto why = fused_unsupported(q, k, v, inputs, call);
    if (why.empty()) return step_fused(q, v, call);
    TORCH_CHECK(path != Path::kFused, "static decode: the fused step cannot take this: ", why);
  }
  return step_composed(q, k, v, inputs);
}

torch::ScalarType StaticDecodeLayer::cache_dtype(const torch::Tensor& q) const {
  const auto dtype = compute_dtype(q);
  TORCH_CHECK(!options_.bfloat16_cache || dtype == torch::kFloat,
              "static decode: bfloat16 caches take float32 or bfloat16 inputs, got ",
              c10::toString(q.scalar_type()));
  return options_.bfloat16_cache ? torch::kBFloat16 : dtype;
}

torch::Tensor StaticDecodeLayer::as_cached(const torch::Tensor& q) const {
  const auto dtype = compute_dtype(q);
  return q.to(kv_.scalar_type()).to(dtype);
}

fused::DecodeStep StaticDecodeLayer::fused_step(const torch::Tensor& q,
                                                const torch::Tensor& k,
                                                const torch::Tensor& v,
                                                const StaticDecodeInputs& inputs) const {
  fused::DecodeStep s;
  s.batch = q.size(0);
  s.heads = q.size(1);
  s.dim = q.size(2);
  s.value_dim = v.size(2);
  s.length = inputs.length();
  s.scale = score_scale(q.size(2));
  s.dtype = fused_dtype(q.scalar_type());
  s.cache = fused_dtype(kv_.scalar_type());
  s.position = inputs.position().data_ptr<int64_t>();
  auto operand = [](const torch::Tensor& x) {
    return fused::Operand{x.data_ptr(), x.stride(0), x.stride(1), 0};
  };
  s.q = operand(q);
  s.k = operand(k);
  s.v = operand(v);
  s.q_cache = q_.defined() ? q_.data_ptr() : nullptr;
  s.kv_cache = kv_.data_ptr();
  s.plans = int(std::min<size_t>(inputs.plans(), fused::kDecodeMaxPlans));
  for (int p = 0; p < s.plans; ++p) {
    auto& plan = s.plan[p];
    plan.direct = inputs.direct(p).data_ptr<int64_t>();
    plan.direct_count = inputs.direct(p).numel();
    plan.slots = inputs.slots(p).data_ptr<int64_t>();
    plan.span_count = inputs.slots(p).numel();
    plan.bias = inputs.bias(p).data_ptr<float>();
    plan.spans = spans_[p].data_ptr();
    plan.span_rows = spans_[p].size(2);
  }
  return s;
}

std::string StaticDecodeLayer::fused_unsupported(const torch::Tensor& q,
                                                 const torch::Tensor& k,
                                                 const torch::Tensor& v,
                                                 const StaticDecodeInputs& inputs,
                                                 const fused::DecodeStep& step) const {
  const auto dtype = q.scalar_type();
  if (k.scalar_type() != dtype || v.scalar_type() != dtype || compute_dtype(q) != dtype)
    return std::string("q, k and v must share a float32 or float64 dtype, got ") +
           c10::toString(q.scalar_type()) + ", " + c10::toString(k.scalar_type()) + ", " +
           c10::toString(v.scalar_type());
  if (q.stride(2) != 1 || k.stride(2) != 1 || v.stride(2) != 1)
    return "q, k and v need a contiguous last axis";
  if (v.size(2) > fused::kDecodeMaxValueDim)
    return "value dim " + std::to_string(v.size(2)) + " over " +
           std::to_string(fused::kDecodeMaxValueDim);
  if (q.size(2) > fused::kDecodeMaxDim)
    return "key dim " + std::to_string(q.size(2)) + " over " + std::to_string(fused::kDecodeMaxDim);
  if (inputs.plans() > size_t(fused::kDecodeMaxPlans))
    return std::to_string(inputs.plans()) + " plans, over " +
           std::to_string(fused::kDecodeMaxPlans);
  if (!fused::decode_dtypes_supported(step))
    return std::string("caches of ") + c10::toString(kv_.scalar_type()) + " beside " +
           c10::toString(dtype) + " inputs";
  if (!q.is_cuda()) return "";
#ifdef COMBINER_WITH_CUDA_KERNELS
  if (dtype != torch::kFloat) return "the CUDA kernel takes float32";
  const int64_t bytes = fused::decode_smem_bytes(step);
  if (bytes > fused::kDecodeMaxSmem)
    return std::to_string(fused::decode_terms(step)) + " terms a step need " +
           std::to_string(bytes) + " bytes of shared memory, over " +
           std::to_string(fused::kDecodeMaxSmem);
  return "";
#else
  return "this build has no CUDA kernels";
#endif
}

torch::Tensor StaticDecodeLayer::step_fused(const torch::Tensor& on,
                                            const torch::Tensor& v,
                                            fused::DecodeStep step) {
  auto out = torch::empty({step.batch, step.heads, step.value_dim}, v.options());
  step.out = out.data_ptr();
  fused_launch::decode_step(on, step);
  return out;
}

torch::Tensor StaticDecodeLayer::step_composed(const torch::Tensor& q,
                                               const torch::Tensor& k,
                                               const torch::Tensor& v,
                                               const StaticDecodeInputs& inputs) {
  const auto dtype = compute_dtype(q), stored = kv_.scalar_type();
  const auto& at = inputs.position();
  if (q_.defined()) q_.index_copy_(2, at, q.unsqueeze(2).to(stored));
  kv_.index_copy_(2, at, torch::cat({k, v}, -1).unsqueeze(2).to(stored));

  const auto query = as_cached(q).unsqueeze(-1);  // [B, H, D, 1]
  torch::Tensor out;
  for (size_t p = 0; p < inputs.plans(); ++p) {
    auto terms = kv_.index_select(2, inputs.direct(p)).to(dtype);  // [B, H, n, D + Dv]
    if (inputs.schedule(p).span_width() > 0)
      terms = torch::cat({terms, spans_[p].index_select(2, inputs.slots(p))}, 2);
    auto scores =
        torch::matmul(keys(terms), query).squeeze(-1) * score_scale(q.size(-1)) + inputs.bias(p);
    auto o = torch::matmul(torch::softmax(scores, -1).unsqueeze(2), values(terms)).squeeze(2);
    out = out.defined() ? out + o : o;
  }
  if (inputs.plans() > 1) out = out / double(inputs.plans());
  return out.to(v.scalar_type());
}

}  // namespace combiner::attention
