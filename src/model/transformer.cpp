#include "model/transformer.h"

#include <cmath>
#include <tuple>

#include "attention/decode.h"
#include "attention/heads.h"
#include "data/dataset.h"
#include "model/checkpointing.h"
#include "model/precision.h"
#include "ops/cross_entropy.h"
#include "ops/weight_cast.h"

namespace combiner::model {

namespace {

// ATen's linear, as Python's nn.Linear calls it: the bias is added by the matmul itself (addmm;
// cuBLASLt's bias epilogue on a GPU). torch::nn::Linear's own forward runs a [B, L, W] input as
// a matmul and then `+= bias`, one more elementwise pass over the output per layer, which under
// bf16 autocast adds an fp32 bias to a bf16 output in a kernel that cannot vectorise.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

}  // namespace

TransformerOptions TransformerOptions::from_config(const config::Config& config) {
  TransformerOptions o;
  o.layers = config.model.layers;
  o.width = config.model.width;
  o.heads = config.model.heads;
  o.mlp_ratio = config.model.mlp_ratio;
  o.dropout = config.model.dropout;
  // auto: nothing recomputed until the trainer has chosen (train/memory_plan.h).
  o.activation_checkpointing = config.train.activation_checkpointing == "true";
  o.recompute_mlp = config.train.recompute_mlp;
  o.bfloat16 = config.train.precision == "bfloat16";
  o.bfloat16_on_cuda = config.train.precision == "auto";
  o.attention = config.model.attention;
  o.image = data::dataset_shape(config.data);  // resolved by config::validate
  o.vocab = int64_t{1} << (config.data.bits > 0 ? config.data.bits : 8);
  return o;
}

BlockImpl::BlockImpl(const TransformerOptions& o) : heads_(o.heads) {
  const int64_t W = o.width;
  ln_attn_ = register_module("ln_attn", LayerNorm(W));
  qkv_ = register_module("qkv", Linear(W, 3 * W));
  attention_ =
      register_module("attention", attention::make_attention(o.attention, o.length(), W / o.heads));
  attn_out_ = register_module("attn_out", Linear(W, W));
  ln_mlp_ = register_module("ln_mlp", LayerNorm(W));
  mlp_in_ = register_module("mlp_in", Linear(W, o.mlp_ratio * W));
  mlp_out_ = register_module("mlp_out", Linear(o.mlp_ratio * W, W));
  dropout_ = register_module("dropout", torch::nn::Dropout(o.dropout));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto [h, branch] = forward_deferred(x, ln_attn_(x));
  return h + branch;
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::forward_deferred(const torch::Tensor& x,
                                                                    const torch::Tensor& normed) {
  auto [h, normed_h] = add_and_norm(x, attention_of_normed(normed));
  return {h, dropout_(mlp_of_normed(normed_h))};
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::add_and_norm(const torch::Tensor& x,
                                                                const torch::Tensor& branch) {
  return ln_mlp_->add_forward(x, branch);
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::input_add_and_norm(const torch::Tensor& x,
                                                                      const torch::Tensor& branch) {
  if (!branch.defined()) return {x, ln_attn_(x)};
  return ln_attn_->add_forward(x, branch);
}

torch::Tensor BlockImpl::attention_half(const torch::Tensor& x) {
  return x + attention_branch(x);
}

torch::Tensor BlockImpl::attention_branch(const torch::Tensor& x) {
  return attention_of_normed(ln_attn_(x));
}

torch::Tensor BlockImpl::attention_of_normed(const torch::Tensor& normed) {
  const int64_t B = normed.size(0), L = normed.size(1), W = normed.size(2), H = heads_;
  // [B, L, 3W] -> three [B, H, L, W/H] views. Backward: the projection's gradient in its own
  // layout, passed on as the fused attention writes it (q, k and v's gradients side by side per
  // position), else made in one stack (attention/heads.h).
  const auto heads = attention::split_heads(qkv_(normed), H);
  torch::Tensor heads_out;
  {
    AutocastGuard fp32_attention(false, normed.device());  // scores, softmax in fp32 (or fp64)
    heads_out = attention_->forward(heads[0], heads[1], heads[2]);
  }
  auto merged = heads_out.transpose(1, 2).reshape({B, L, W});
  return dropout_(attn_out_(merged));
}

torch::Tensor BlockImpl::mlp_half(const torch::Tensor& h) {
  return h + dropout_(mlp_branch(h));
}

torch::Tensor BlockImpl::mlp_branch(const torch::Tensor& h) {
  return mlp_of_normed(ln_mlp_(h));
}

torch::Tensor BlockImpl::mlp_of_normed(const torch::Tensor& normed) {
  return mlp_out_(mlp_in_->forward_gelu(normed));
}

// What dropout_(branch) computes, from the same draws, with what replays it: at::dropout runs
// native_dropout on CUDA (a bool mask), and on the CPU multiplies by noise it draws with
// bernoulli_ and scales by 1 / (1 - p).
std::pair<torch::Tensor, torch::Tensor> BlockImpl::mlp_dropout(const torch::Tensor& branch) {
  const double p = dropout_p();
  if (!is_training() || p == 0) return {branch, torch::Tensor()};
  if (branch.is_cuda()) {
    auto [out, mask] = at::native_dropout(branch, p, true);
    return {out, mask};
  }
  auto noise = at::empty_like(branch, at::MemoryFormat::Contiguous).bernoulli_(1 - p).div_(1 - p);
  return {branch * noise, noise};
}

torch::Tensor BlockImpl::replay_mlp_dropout(const torch::Tensor& branch,
                                            const torch::Tensor& kept) {
  if (!kept.defined()) return branch;
  if (kept.scalar_type() == torch::kBool)
    return at::native_dropout_backward(branch, kept, 1.0 / (1.0 - dropout_p()));
  return branch * kept;
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::step(const torch::Tensor& x,
                                                        const torch::Tensor& pending,
                                                        const Attend& attend) {
  const int64_t B = x.size(0), W = x.size(1), H = heads_;
  auto drop = [&](const torch::Tensor& y) { return is_training() ? dropout_(y) : y; };
  // Each LayerNorm with the residual add before it and the linear after it (and the MLP's GELU):
  // one kernel on the fused path (LayerNormImpl::add_forward_linear), as forward() otherwise.
  auto [input, qkv] = ln_attn_->add_forward_linear(x, pending, qkv_->weight, qkv_->bias, false);
  qkv = qkv.view({B, 3, H, W / H});
  auto heads_out = attend(qkv.select(1, 0), qkv.select(1, 1), qkv.select(1, 2));
  auto [h, hidden] = ln_mlp_->add_forward_linear(
      input, drop(attn_out_(heads_out.reshape({B, W}))), mlp_in_->weight, mlp_in_->bias, true);
  return {h, drop(mlp_out_(hidden))};
}

std::unique_ptr<attention::DecodeState> BlockImpl::start_decoding(int64_t length) const {
  return attention_->start_decoding(length);
}

std::vector<LinearImpl*> BlockImpl::linears() {
  return {qkv_.get(), attn_out_.get(), mlp_in_.get(), mlp_out_.get()};
}

ImageTransformerImpl::ImageTransformerImpl(const TransformerOptions& o) : options_(o) {
  const int64_t W = o.width;
  token_embed_ = register_module("token_embed", torch::nn::Embedding(o.vocab + 1, W));
  row_embed_ = register_module("row_embed", torch::nn::Embedding(o.image.height, W));
  col_embed_ = register_module("col_embed", torch::nn::Embedding(o.image.width, W));
  channel_embed_ = register_module("channel_embed", torch::nn::Embedding(o.image.channels, W));
  embed_dropout_ = register_module("embed_dropout", torch::nn::Dropout(o.dropout));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t l = 0; l < o.layers; ++l) blocks_->push_back(Block(o));
  ln_final_ = register_module("ln_final", LayerNorm(W));
  head_ = register_module("head", torch::nn::Linear(W, o.vocab));

  // GPT-2 initialisation: N(0, 0.02) weights, zero biases, and residual output projections
  // scaled by 1/sqrt(2 * layers) so the residual stream's variance does not grow with depth.
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const auto& name = p.key();
    auto& t = p.value();
    if (name.find("ln_") != std::string::npos) continue;  // LayerNorm keeps ones and zeros
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      t.zero_();
    } else if (name.find("attn_out.weight") != std::string::npos ||
               name.find("mlp_out.weight") != std::string::npos) {
      t.normal_(0.0, 0.02 / std::sqrt(2.0 * double(o.layers)));
    } else if (name.find(".attention.") == std::string::npos) {
      t.normal_(0.0, 0.02);  // the attention module initialises its own (DeepSets) parameters
    }
  }
}

torch::Tensor input_tokens(const torch::Tensor& x, int64_t start_token) {
  auto tokens = x.to(torch::kLong);
  auto start = torch::full({x.size(0), 1}, start_token, tokens.options());
  return torch::cat({start, tokens.narrow(1, 0, x.size(1) - 1)}, 1);
}

torch::Tensor ImageTransformerImpl::position_embeddings(const torch::Device& device,
                                                        const PickPositions& pick) {
  // Position p = (row, column, channel) in raster order with channels innermost.
  if (!rows_.defined() || rows_.device() != device) {
    auto p = torch::arange(options_.length(), torch::dtype(torch::kLong).device(device));
    const auto& img = options_.image;
    rows_ = p.div(img.width * img.channels, "floor");
    columns_ = p.div(img.channels, "floor").remainder(img.width);
    channels_ = p.remainder(img.channels);
  }
  return row_embed_(pick(rows_)) + col_embed_(pick(columns_)) + channel_embed_(pick(channels_));
}

torch::Tensor ImageTransformerImpl::embed_positions(const torch::Tensor& tokens,
                                                    const PickPositions& pick) {
  return embed_dropout_(token_embed_(tokens) + position_embeddings(tokens.device(), pick));
}

torch::Tensor ImageTransformerImpl::position_table() {
  return position_embeddings(token_embed_->weight.device(),
                             [](const torch::Tensor& table) { return table; });
}

torch::Tensor ImageTransformerImpl::embed_at(const torch::Tensor& tokens,
                                             const torch::Tensor& position,
                                             const torch::Tensor& table) {
  return embed_dropout_(token_embed_(tokens) + table.index_select(0, position));
}

torch::Tensor ImageTransformerImpl::embed(const torch::Tensor& tokens, int64_t first) {
  const int64_t n = tokens.size(1);
  return embed_positions(tokens,
                         [&](const torch::Tensor& table) { return table.narrow(0, first, n); });
}

torch::Tensor ImageTransformerImpl::embed_at(const torch::Tensor& tokens,
                                             const torch::Tensor& position) {
  return embed_positions(
      tokens, [&](const torch::Tensor& table) { return table.index_select(0, position); });
}

torch::Tensor ImageTransformerImpl::step_logits(torch::Tensor h, const AttendLayer& attend) {
  torch::Tensor pending;  // each block's last residual add, done in the next LayerNorm's passes
  size_t layer = 0;
  for (const auto& block : *blocks_) {
    const size_t l = layer++;
    std::tie(h, pending) = block->as<Block>()->step(
        h, pending, [&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
          return attend(l, q, k, v);
        });
  }
  return head_(pending.defined() ? ln_final_->add_forward(h, pending).second : ln_final_(h));
}

torch::Tensor ImageTransformerImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 2, "model input must be [B, L], got ", x.sizes());
  const int64_t L = x.size(1);
  TORCH_CHECK(L >= 1 && L <= options_.length(),
              "model input length ",
              L,
              " outside [1, ",
              options_.length(),
              "]");
  auto h = embed(input_tokens(x, options_.vocab), 0);
  // Without recomputation each block's last residual add is left to the LayerNorm after it (the
  // next block's first, or the final one), in that norm's passes: the output is h + pending.
  torch::Tensor pending;
  {
    const bool bf16 = options_.bfloat16 || (options_.bfloat16_on_cuda && h.is_cuda());
    AutocastGuard autocast(bf16, h.device());
    const bool grad = torch::GradMode::is_enabled();
    if (bf16 && grad) write_weight_copies(h.device());
    const bool whole = options_.activation_checkpointing && grad;
    const bool mlp = options_.recompute_mlp && grad && !whole;
    for (const auto& module : *blocks_) {
      auto& block = *module->as<Block>();
      if (whole || mlp) {
        h = whole ? checkpointed_forward(block, h)
                  : checkpointed_mlp(block, h, block.attention_branch(h));
        continue;
      }
      auto [x, normed] = block.input_add_and_norm(h, pending);
      std::tie(h, pending) = block.forward_deferred(x, normed);
    }
  }
  // Logits from fp32.
  if (!pending.defined()) return linear(head_, ln_final_(h.to(torch::kFloat))).to(torch::kFloat);
  return linear(head_, ln_final_->add_forward(h.to(torch::kFloat), pending).second)
      .to(torch::kFloat);
}

void ImageTransformerImpl::write_weight_copies(const torch::Device& device) {
  std::vector<LinearImpl*> layers;
  std::vector<torch::Tensor> sources;
  for (const auto& module : *blocks_)
    for (auto* layer : module->as<Block>()->linears())
      if (layer->fused_on(device)) {
        layers.push_back(layer);
        sources.push_back(layer->weight);
        sources.push_back(layer->bias);
      }
  if (!ops::weight_copies_unsupported(sources).empty()) return;  // none fused, or not float32
  if (!weight_copies_ || !weight_copies_->covers(sources))
    weight_copies_ = std::make_shared<ops::WeightCopies>(sources);
  weight_copies_->write();
  for (size_t i = 0; i < layers.size(); ++i)
    layers[i]->use_copies(weight_copies_->copy(2 * i), weight_copies_->copy(2 * i + 1));
}

torch::Tensor ImageTransformerImpl::subpixel_bits(const torch::Tensor& x) {
  return bits(x, false);
}

torch::Tensor ImageTransformerImpl::mean_bits(const torch::Tensor& x) {
  return bits(x, true);
}

torch::Tensor ImageTransformerImpl::bits(const torch::Tensor& x, bool mean) {
  const auto logits = forward(x);
  const bool fused = loss_path_ == LayerNormImpl::Path::kFused ||
                     (loss_path_ == LayerNormImpl::Path::kAuto && logits.is_cuda());
  if (fused && ops::cross_entropy_unsupported(logits, x).empty())
    return ops::cross_entropy_bits(logits, x, mean);
  return ops::cross_entropy_bits_composed(logits, x, mean);
}

void set_kernel_path(torch::nn::Module& model, const std::string& path) {
  using Attention = attention::AttentionImpl;
  const auto chosen = path == "composed" ? Attention::Path::kComposed
                      : path == "fused"  ? Attention::Path::kFused
                                         : Attention::Path::kAuto;
  const auto norm = path == "composed" ? LayerNormImpl::Path::kComposed
                    : path == "fused"  ? LayerNormImpl::Path::kFused
                                       : LayerNormImpl::Path::kAuto;
  for (const auto& module : model.modules()) {
    if (auto* layer = dynamic_cast<Attention*>(module.get())) layer->set_path(chosen);
    if (auto* layer = dynamic_cast<LayerNormImpl*>(module.get())) layer->set_path(norm);
    if (auto* layer = dynamic_cast<LinearImpl*>(module.get())) layer->set_path(norm);
    if (auto* net = dynamic_cast<ImageTransformerImpl*>(module.get())) net->set_loss_path(norm);
  }
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace combiner::model
