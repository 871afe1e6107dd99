// The transformer one position at a time, as model/decoder.h, in tensors whose shapes and
// addresses are the same at every step (attention/static_decode.h): so on a GPU the whole step,
// every layer's projections, attention and MLP, is captured once as a CUDA graph and replayed,
// where a 128-layer model would otherwise launch thousands of small kernels per subpixel. Between
// steps the host writes the next position's index lists and, where spans finish, makes their
// summaries eagerly. Logits equal forward()'s at the same position (to rounding).
#pragma once

#include <torch/torch.h>

#include "attention/static_decode.h"
#include "model/transformer.h"

#include <memory>
#include <string>
#include <vector>

namespace combiner::util {
class CapturedWork;
}

namespace combiner::model {

class StaticDecoder {
 public:
  // The model must outlive the decoder; call under torch::NoGradGuard in eval mode. With
  // `capture` (and a CUDA model in a CUDA build) the second step captures the work; a capture
  // that fails is reported by capture_error() and the steps then run op by op. With
  // `bfloat16_cache` every layer keeps its q, k and v in bfloat16 (attention/static_decode.h):
  // half the memory, attention over the rounded values.
  StaticDecoder(ImageTransformer model, int64_t batch, bool capture, bool bfloat16_cache = false);
  ~StaticDecoder();
  StaticDecoder(const StaticDecoder&) = delete;
  StaticDecoder& operator=(const StaticDecoder&) = delete;

  // token: [batch] integer input at position i = position(): the start token at 0, else
  // x_{i-1}. Returns the logits predicting x_i, [batch, vocab] float32 on the model's device.
  torch::Tensor step(const torch::Tensor& token);

  int64_t position() const { return position_; }
  bool captured() const { return graph_ != nullptr; }
  // The mean GPU time of the captured steps' replays so far, in milliseconds (waits for the
  // last); -1 when nothing was replayed.
  double mean_replay_ms();
  const std::string& capture_error() const { return capture_error_; }

 private:
  void work();  // one step's device work: what a capture records

  ImageTransformer model_;
  int64_t batch_;
  bool capture_;
  int64_t position_ = 0;
  attention::StaticDecodeInputs inputs_;
  std::vector<attention::StaticDecodeLayer> layers_;
  torch::Tensor positions_;  // [L, width]: each position's embeddings, summed once
  torch::Tensor token_;      // [batch, 1] int64: the step's input
  torch::Tensor logits_;     // [batch, vocab] float32: the step's output
  std::unique_ptr<util::CapturedWork> graph_;
  double replay_ms_ = 0;  // the replays timed so far, in all
  int64_t replays_ = 0;   // how many
  bool untimed_ = false;  // a replay not yet added to them
  std::string capture_error_;
};

}  // namespace combiner::model
