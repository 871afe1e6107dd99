#include "attention/fused/reference.h"

#include "attention/axial_common.h"
#include "attention/span_ops.h"

namespace combiner::attention {

torch::Tensor joint_fixed_reference(const torch::Tensor& q,
                                    const torch::Tensor& k,
                                    const torch::Tensor& v,
                                    const torch::Tensor& ks,
                                    const torch::Tensor& u,
                                    int64_t block) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), s = block;
  const int64_t n = (L + s - 1) / s;
  const double scale = score_scale(D);
  auto qb = to_blocks(q, s), kb = to_blocks(k, s), vb = to_blocks(v, s);
  std::vector<torch::Tensor> scores = {masked(torch::matmul(qb, kb.transpose(-2, -1)) * scale,
                                              causal_allowed(s, false, q.device()))};
  if (ks.defined()) {
    const int64_t spans = ks.size(2);
    auto e = torch::matmul(qb.reshape({B, H, n * s, D}), ks.transpose(-2, -1)) * scale;
    auto allowed = causal_allowed(n, true, q.device()).narrow(1, 0, spans).unsqueeze(1);
    scores.push_back(masked(e.view({B, H, n, s, spans}), allowed));
  }
  auto w = joint_softmax(scores);
  auto out = torch::matmul(w[0], vb);
  if (ks.defined())
    out = out + torch::matmul(w[1].reshape({B, H, n * s, ks.size(2)}), u).view(out.sizes());
  return out.reshape({B, H, n * s, v.size(3)}).narrow(2, 0, L);
}

torch::Tensor joint_rowmajor_reference(const torch::Tensor& q,
                                       const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& ks,
                                       const torch::Tensor& u,
                                       int64_t row_len) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), D = q.size(3), W = row_len;
  const int64_t n = (L + W - 1) / W;
  const double scale = score_scale(D);
  auto qr = to_blocks(q, W), kr = to_blocks(k, W), vr = to_blocks(v, W);  // [B, H, n, W, *]
  std::vector<torch::Tensor> scores = {masked(torch::matmul(qr, kr.transpose(-2, -1)) * scale,
                                              causal_allowed(W, false, q.device()))};
  if (ks.defined()) {
    const int64_t spans = ks.size(2);
    auto e = torch::matmul(qr.reshape({B, H, n * W, D}), ks.transpose(-2, -1)) * scale;
    auto allowed = causal_allowed(n, true, q.device()).narrow(1, 0, spans).unsqueeze(1);
    scores.push_back(masked(e.view({B, H, n, W, spans}), allowed));
  }
  auto w = joint_softmax(scores);
  auto out = torch::matmul(w[0], vr);
  if (ks.defined())  // (R, c) reads u[(r, c)] of every earlier row r
    out =
        out + torch::einsum("bhRcr,bhrcd->bhRcd", {w[1], u.view({B, H, ks.size(2), W, u.size(3)})});
  return out.reshape({B, H, n * W, v.size(3)}).narrow(2, 0, L);
}

torch::Tensor joint_vertical_reference(const torch::Tensor& q,
                                       const torch::Tensor& k,
                                       const torch::Tensor& v,
                                       const torch::Tensor& ks,
                                       const torch::Tensor& u,
                                       int64_t row_len) {
  const int64_t L = q.size(2), W = row_len, n = (L + W - 1) / W;
  auto qr = to_blocks(q, W), kr = to_blocks(k, W), vr = to_blocks(v, W);  // [B, H, n, W, *]
  const auto scores = axial_scores(qr, kr, score_scale(q.size(3)));
  std::vector<torch::Tensor> parts = {scores.row, scores.column};
  torch::Tensor u_above;
  if (ks.defined()) {  // (R, c') sees ks[(R - 1, c)], u[(R - 1, c)] for c != c', R >= 1
    auto above = [&](const torch::Tensor& x) {
      auto rows = to_blocks(x, W);
      return torch::cat({torch::zeros_like(rows.narrow(2, 0, 1)), rows}, 2);
    };
    auto allowed = torch::eye(W, torch::dtype(torch::kBool).device(q.device())).logical_not();
    allowed = allowed.logical_and(torch::arange(n, q.device()).ge(1).view({n, 1, 1}));
    parts.push_back(
        masked(torch::matmul(qr, above(ks).transpose(-2, -1)) * score_scale(q.size(3)), allowed));
    u_above = above(u);
  }
  auto w = joint_softmax(parts);
  auto out = axial_output(w[0], w[1], vr);
  if (ks.defined()) out = out + torch::matmul(w[2], u_above);
  return out.reshape({q.size(0), q.size(1), n * W, v.size(3)}).narrow(2, 0, L);
}

torch::Tensor joint_horizontal_reference(const torch::Tensor& q,
                                         const torch::Tensor& k,
                                         const torch::Tensor& v,
                                         const torch::Tensor& ks,
                                         const torch::Tensor& u,
                                         int64_t row_len) {
  const int64_t L = q.size(2), W = row_len, n = (L + W - 1) / W;
  const double scale = score_scale(q.size(3));
  auto qr = to_blocks(q, W), kr = to_blocks(k, W), vr = to_blocks(v, W);  // [B, H, n, W, *]
  const auto scores = axial_scores(qr, kr, scale);
  std::vector<torch::Tensor> parts = {scores.row, scores.column};
  std::vector<torch::Tensor> values;
  if (ks.defined()) {
    // (R, c) sees row r < R's prefix summary at (r, c - 1) when c > 0 and its suffix one at
    // (r, c + 1) when c < W - 1: each half of ks, u shifted by one column towards (R, c).
    const int64_t spans = ks.size(2) / (2 * W);
    auto column = torch::arange(W, q.device()).view({W, 1});
    auto earlier = causal_allowed(n, true, q.device()).narrow(1, 0, spans).unsqueeze(1);
    for (bool suffix : {false, true}) {
      auto half = [&](const torch::Tensor& x) {
        auto rows = x.narrow(2, suffix ? spans * W : 0, spans * W)
                        .reshape({x.size(0), x.size(1), spans, W, x.size(3)});
        return shift_one(rows, 3, /*forward=*/!suffix);
      };
      auto e = torch::einsum("bhRcd,bhrcd->bhRcr", {qr, half(ks)}) * scale;
      parts.push_back(masked(e, earlier.logical_and(suffix ? column.lt(W - 1) : column.gt(0))));
      values.push_back(half(u));
    }
  }
  auto w = joint_softmax(parts);
  auto out = axial_output(w[0], w[1], vr);
  for (size_t i = 0; i < values.size(); ++i)
    out = out + torch::einsum("bhRcr,bhrcd->bhRcd", {w[2 + i], values[i]});
  return out.reshape({q.size(0), q.size(1), n * W, v.size(3)}).narrow(2, 0, L);
}

}  // namespace combiner::attention
