// A small image transformer whose attention is far from uniform, and the largest difference
// between a decoder's logits and forward()'s: the decoders' tests (tests/model/decoder_test.cpp)
// and the same on the CUDA kernels' own source (tests/emulated/decoder_test.cpp).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <ostream>
#include <string>

#include "model/transformer.h"

namespace combiner::model {

struct DecoderCase {
  std::string type, abstraction;
  int64_t block, row_len;
};
inline std::ostream& operator<<(std::ostream& out, const DecoderCase& c) {  // GoogleTest's
  return out << c.type << " " << c.abstraction << " s " << c.block << " W " << c.row_len;
}

// 2 layers, 2 heads, 4 x 4 x 3 images (L = 48).
inline ImageTransformer random_model(const DecoderCase& c, int64_t width = 16) {
  TransformerOptions o;
  o.layers = 2;
  o.width = width;
  o.heads = 2;
  o.mlp_ratio = 2;
  o.image = {4, 4, 3};  // L = 48
  o.attention = {c.type, c.block, c.row_len, c.abstraction};
  torch::manual_seed(3);
  ImageTransformer model(o);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) {
    if (p.dim() >= 2) p.normal_(0.0, 0.5);  // GPT-2 init is too small: attention ~ uniform
    if (p.dim() == 1) p.add_(torch::randn_like(p) * 0.1);  // biases, LayerNorms' scales: in use
  }
  model->eval();
  return model;
}

// The largest difference between a decoder's logits at each step and forward()'s [B, L, 256].
template <typename AnyDecoder>
inline double worst_step_error(AnyDecoder& decoder,
                               const torch::Tensor& tokens,
                               const torch::Tensor& expected) {
  double worst = 0;
  for (int64_t i = 0; i < tokens.size(1); ++i) {
    auto logits = decoder.step(tokens.select(1, i));
    worst = std::max(worst, (logits - expected.select(1, i)).abs().max().template item<double>());
  }
  return worst;
}

}  // namespace combiner::model
