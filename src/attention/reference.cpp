// Plain loops over accessors: for each head and position, score the direct keys and the span
// summaries, one softmax, then spread each span's weight by its local softmax.
#include "attention/reference.h"

#include <algorithm>
#include <cmath>

namespace combiner::attention {

namespace {
using Rows = torch::TensorAccessor<double, 2>;  // [L, D] of one head
using Vec = std::vector<double>;

double dot(const Vec& a, const Rows& x, int64_t j) {
  double out = 0;
  for (size_t d = 0; d < a.size(); ++d) out += a[d] * x[j][d];
  return out;
}

Vec row(const Rows& x, int64_t j) {
  Vec out(x.size(1));
  for (size_t d = 0; d < out.size(); ++d) out[d] = x[j][d];
  return out;
}

Vec pool(const Rows& x, const std::vector<int64_t>& positions, bool max) {
  Vec out = row(x, positions[0]);
  for (size_t t = 1; t < positions.size(); ++t)
    for (size_t d = 0; d < out.size(); ++d)
      out[d] = max ? std::max(out[d], x[positions[t]][d]) : out[d] + x[positions[t]][d];
  if (!max)
    for (auto& e : out) e /= double(positions.size());
  return out;
}

Vec softmax(const Vec& scores) {
  const double top = *std::max_element(scores.begin(), scores.end());
  Vec out;
  double total = 0;
  for (double e : scores) total += out.emplace_back(std::exp(e - top));
  for (auto& w : out) w /= total;
  return out;
}

torch::Tensor apply_map(const torch::Tensor& x, const torch::Tensor& w) {
  if (!w.defined()) return x;
  return torch::relu(torch::matmul(x, w.to(torch::kDouble).t()));
}

// Fills a[i] for one head. q, k raw; pq, pk after the DeepSets maps.
void fill_row(const PositionPlan& plan,
              int64_t i,
              const Rows& q,
              const Rows& k,
              const Rows& pq,
              const Rows& pk,
              bool max,
              torch::TensorAccessor<double, 2> a) {
  const double scale = 1.0 / std::sqrt(double(q.size(1)));
  const Vec qi = row(q, i);
  Vec scores;
  for (int64_t j : plan.direct) scores.push_back(dot(qi, k, j) * scale);
  for (const auto& span : plan.spans) {
    const Vec k_span = pool(pk, span.positions, max);
    double e = 0;
    for (size_t d = 0; d < qi.size(); ++d) e += qi[d] * k_span[d];
    scores.push_back(e * scale);
  }
  const Vec w = softmax(scores);
  for (size_t t = 0; t < plan.direct.size(); ++t) a[i][plan.direct[t]] = w[t];
  for (size_t r = 0; r < plan.spans.size(); ++r) {
    const auto& span = plan.spans[r];
    const Vec local_q =
        span.query_position >= 0 ? row(q, span.query_position) : pool(pq, span.positions, max);
    Vec local;
    for (int64_t j : span.positions) local.push_back(dot(local_q, k, j) * scale);
    local = softmax(local);
    for (size_t t = 0; t < span.positions.size(); ++t)
      a[i][span.positions[t]] = w[plan.direct.size() + r] * local[t];
  }
}
}  // namespace

DeepSetsMaps deepsets_maps(const AttentionImpl& module) {
  DeepSetsMaps maps;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (p.key() == "phi_query") maps.query = p.value().detach();
    if (p.key() == "phi_key") maps.key = p.value().detach();
  }
  return maps;
}

std::vector<torch::Tensor> plan_matrices(const AttentionOptions& options,
                                         const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const DeepSetsMaps& maps) {
  torch::NoGradGuard no_grad;
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2);
  const bool max = options.abstraction == "max" || options.abstraction == "deepsets-max";
  auto qd = q.detach().to(torch::kDouble).contiguous(),
       kd = k.detach().to(torch::kDouble).contiguous();
  auto pq = apply_map(qd, maps.query).contiguous(), pk = apply_map(kd, maps.key).contiguous();
  auto qa = qd.accessor<double, 4>(), ka = kd.accessor<double, 4>();
  auto pqa = pq.accessor<double, 4>(), pka = pk.accessor<double, 4>();

  std::vector<torch::Tensor> out;
  for (const auto& plan : make_plans(options, L)) {
    auto a = torch::zeros({B, H, L, L}, torch::kDouble);
    auto aa = a.accessor<double, 4>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          fill_row(plan[i], i, qa[b][h], ka[b][h], pqa[b][h], pka[b][h], max, aa[b][h]);
    out.push_back(a);
  }
  return out;
}

torch::Tensor effective_matrix(const AttentionOptions& options,
                               const torch::Tensor& q,
                               const torch::Tensor& k,
                               const DeepSetsMaps& maps) {
  auto plans = plan_matrices(options, q, k, maps);
  return torch::stack(plans).mean(0);
}

torch::Tensor reference_attention(const AttentionOptions& options,
                                  const AttentionImpl& module,
                                  const torch::Tensor& q,
                                  const torch::Tensor& k,
                                  const torch::Tensor& v) {
  auto a = effective_matrix(options, q, k, deepsets_maps(module));
  return torch::matmul(a, v.detach().to(torch::kDouble));
}

}  // namespace combiner::attention
