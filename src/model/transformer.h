// Decoder-only transformer over subpixel sequences. Input at position i is x_{i-1} (a start
// token at 0), so the output at i predicts x_i from x_<i; every attention variant plugs in
// through attention::AttentionImpl, built by the one factory.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "attention/attention.h"
#include "config/config.h"
#include "data/image_set.h"
#include "model/layer_norm.h"
#include "model/linear.h"

namespace combiner::ops {
class WeightCopies;
}

namespace combiner::model {

struct TransformerOptions {
  int64_t layers = 4;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;
  double dropout = 0.0;
  bool activation_checkpointing = false;  // recompute block activations in backward
  bool recompute_mlp = false;             // recompute only the MLP halves in backward
  bool bfloat16 = false;                  // bf16 autocast in the blocks (attention stays fp32)
  bool bfloat16_on_cuda = false;          // the same where the input is on CUDA (precision auto)
  attention::AttentionOptions attention;
  data::ImageShape image;  // sets L and the factorised (row, column, channel) position tables
  int64_t vocab = 256;     // subpixel values, 2^data.bits; token `vocab` starts a sequence

  static TransformerOptions from_config(const config::Config& config);
  int64_t length() const { return image.length(); }
};

constexpr int64_t kVocab = 256;          // subpixel values of 8-bit data (the default vocab)
constexpr int64_t kStartToken = kVocab;  // extra input token for position 0 at that vocab

// Pre-LayerNorm block: h = x + Attn(LN(x)), then h + MLP(LN(h)).
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const TransformerOptions& options);
  torch::Tensor forward(const torch::Tensor& x);  // [B, L, width] -> [B, L, width]
  // Its two halves: forward(x) = mlp_half(attention_half(x)), the same numbers (forward adds
  // attention_half's residual in ln_mlp's pass over its sum: LayerNormImpl::add_forward).
  torch::Tensor attention_half(const torch::Tensor& x);
  torch::Tensor mlp_half(const torch::Tensor& h);

  // The MLP half's parts, for its recomputation (model/checkpointing.h): the branch before its
  // dropout, mlp_out(GELU(mlp_in(LayerNorm(h)))); that dropout as the module draws it, with what
  // replays it (a bool mask on CUDA, the scaled noise on the CPU; undefined when it is off: eval
  // mode or p = 0); and the replay of that kept draw on a recomputed branch.
  torch::Tensor mlp_branch(const torch::Tensor& h);
  // forward(x) as (h, branch), forward(x) = h + branch, given normed = ln_attn(x): the two
  // residual adds each left to the LayerNorm after it (input_add_and_norm of the next block, or
  // the model's final one) where the kernels add them in the norm's passes.
  std::pair<torch::Tensor, torch::Tensor> forward_deferred(const torch::Tensor& x,
                                                           const torch::Tensor& normed);
  // (x + branch, ln_attn(x + branch)); (x, ln_attn(x)) for an undefined branch.
  std::pair<torch::Tensor, torch::Tensor> input_add_and_norm(const torch::Tensor& x,
                                                             const torch::Tensor& branch);
  // The attention half's branch, dropout(attn_out(Attn(LN(x)))): attention_half(x) = x + it;
  // attention_of_normed(ln_attn(x)) is the same.
  torch::Tensor attention_branch(const torch::Tensor& x);
  torch::Tensor attention_of_normed(const torch::Tensor& normed);
  // (h, ln_mlp(h)) for h = x + branch, the add done in the LayerNorm's passes where it is fused;
  // and mlp_branch(h) = mlp_of_normed(ln_mlp(h)) = mlp_out(GELU(mlp_in(ln_mlp(h)))).
  std::pair<torch::Tensor, torch::Tensor> add_and_norm(const torch::Tensor& x,
                                                       const torch::Tensor& branch);
  torch::Tensor mlp_of_normed(const torch::Tensor& normed);
  std::pair<torch::Tensor, torch::Tensor> mlp_dropout(const torch::Tensor& branch);
  torch::Tensor replay_mlp_dropout(const torch::Tensor& branch, const torch::Tensor& kept);
  double dropout_p() const { return dropout_->options.p(); }

  // The same block at one position, x [B, width], its attention through `attend` (q, k:
  // [B, H, D], v: [B, H, Dv] -> [B, H, Dv]), with the residual adds left to the LayerNorm after
  // each, as forward() runs them: (x, pending) -> (h, branch), the block's output being
  // h + branch, where `pending` is the previous block's branch (undefined for the first) still to
  // be added to x. In eval mode no dropout is called (it would copy nothing, but it is one more
  // op to count and to capture).
  using Attend = std::function<torch::Tensor(
      const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)>;
  std::pair<torch::Tensor, torch::Tensor> step(const torch::Tensor& x,
                                               const torch::Tensor& pending,
                                               const Attend& attend);
  std::unique_ptr<attention::DecodeState> start_decoding(int64_t length) const;
  const attention::AttentionImpl& attention() const { return *attention_; }
  // Its four linear layers: qkv, attn_out, mlp_in, mlp_out.
  std::vector<LinearImpl*> linears();

 private:
  int64_t heads_;
  LayerNorm ln_attn_{nullptr}, ln_mlp_{nullptr};
  Linear qkv_{nullptr}, attn_out_{nullptr}, mlp_in_{nullptr}, mlp_out_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  std::shared_ptr<attention::AttentionImpl> attention_;
};
TORCH_MODULE(Block);

class ImageTransformerImpl : public torch::nn::Module {
 public:
  explicit ImageTransformerImpl(const TransformerOptions& options);

  // x: [B, L'] integer subpixels (any integer dtype), L' <= L a prefix length the attention
  // layout accepts. Returns logits [B, L', 256] in float32: position i predicts x_i.
  torch::Tensor forward(const torch::Tensor& x);
  // The bits of each subpixel of x under the model ([B, L'] float32), and their mean (the
  // training loss, 0-dim): forward's logits through one fused pass each way on the fused path
  // (ops::cross_entropy_bits), else LibTorch's log_softmax (ops::cross_entropy_bits_composed).
  torch::Tensor subpixel_bits(const torch::Tensor& x);
  torch::Tensor mean_bits(const torch::Tensor& x);

  // Where the loss runs, as LayerNormImpl::Path (set_kernel_path sets it with the layers').
  void set_loss_path(LayerNormImpl::Path path) { loss_path_ = path; }

  const TransformerOptions& options() const { return options_; }
  // What backward recomputes from now on: whole blocks, or their MLP halves (train/memory_plan.h
  // chooses it for train.activation_checkpointing auto).
  void set_recompute(bool whole_blocks, bool mlp) {
    options_.activation_checkpointing = whole_blocks;
    options_.recompute_mlp = mlp;
  }

 private:
  friend class Decoder;        // model/decoder.h: the same network, one position at a time
  friend class StaticDecoder;  // model/static_decoder.h: likewise, in shapes fixed for capture

  // Token plus (row, column, channel) embeddings of tokens [B, n] at positions first.. first+n-1.
  torch::Tensor embed(const torch::Tensor& tokens, int64_t first);
  // The same for tokens [B, 1] at the position held in `position` ([1] int64 on their device).
  torch::Tensor embed_at(const torch::Tensor& tokens, const torch::Tensor& position);
  // The same, the position's embeddings read from `table` (position_table()): one gather where
  // the other reads three tables and adds them (the static decoder's step).
  torch::Tensor embed_at(const torch::Tensor& tokens,
                         const torch::Tensor& position,
                         const torch::Tensor& table);
  // Every position's (row, column, channel) embeddings summed as embed() sums them: [L, width].
  torch::Tensor position_table();
  // The positions `pick` takes from each [L] index table, their three embeddings summed; and
  // the token embedding plus those.
  using PickPositions = std::function<torch::Tensor(const torch::Tensor& table)>;
  torch::Tensor position_embeddings(const torch::Device& device, const PickPositions& pick);
  torch::Tensor embed_positions(const torch::Tensor& tokens, const PickPositions& pick);
  // One position through the blocks and the head, the residual adds in the LayerNorms after
  // them (BlockImpl::step): h [B, width] embedded -> logits [B, vocab], block l's
  // attention through attend(l, q, k, v).
  using AttendLayer = std::function<torch::Tensor(
      size_t layer, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)>;
  torch::Tensor step_logits(torch::Tensor h, const AttendLayer& attend);
  torch::Tensor bits(const torch::Tensor& x, bool mean);  // subpixel_bits, or their mean
  // Under bf16 autocast with a gradient: every block linear layer that takes the fused path on
  // `device` given its weight's and bias's bf16 copies, all written now in one launch
  // (ops::WeightCopies), where each layer would cast its own two (8 launches a block).
  void write_weight_copies(const torch::Device& device);

  TransformerOptions options_;
  torch::nn::Embedding token_embed_{nullptr}, row_embed_{nullptr}, col_embed_{nullptr},
      channel_embed_{nullptr};
  // Every position's row, column and channel [L] (int64), made once on the device that uses them:
  // not parameters or buffers, so checkpoints do not hold them.
  torch::Tensor rows_, columns_, channels_;
  torch::nn::Dropout embed_dropout_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  LayerNorm ln_final_{nullptr};
  torch::nn::Linear head_{nullptr};
  LayerNormImpl::Path loss_path_ = LayerNormImpl::Path::kAuto;
  std::shared_ptr<ops::WeightCopies> weight_copies_;  // made on the first write, kept while valid
};
TORCH_MODULE(ImageTransformer);

// Shifts x right by one and puts the start token first: the model's input tokens. [B, L] int64.
torch::Tensor input_tokens(const torch::Tensor& x, int64_t start_token = kStartToken);

int64_t parameter_count(const torch::nn::Module& module);

// train.attention_path on every attention layer, LayerNorm and block's linear layer of `model`,
// and on its loss:
// auto (the fused CUDA kernels where they apply), composed (always the LibTorch composition) or
// fused (always the fused path; on the CPU the kernels' model: slow, for counting on the CPU the
// launches and memory a GPU run has).
void set_kernel_path(torch::nn::Module& model, const std::string& path);

}  // namespace combiner::model
