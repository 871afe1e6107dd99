// What `combiner-bench train` measures: full training steps (forward, bits/dim loss, backward,
// clipping, AdamW) of a config's model on random tokens of its dataset's shape, so no dataset
// files are needed, and model FLOP utilisation against the best matmul rate of the same run
// (several sizes, measured before and after the steps, in the step's precision).
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "model/transformer.h"
#include "train/step_checks.h"

namespace combiner::train {

// The FLOP counting rule, as --help states it. Counted work is the useful work: `full`'s masked
// upper triangle and padding inside the fast paths are not counted.
constexpr const char* kFlopRule =
    "FLOPs/step = 6 x (weights of every Linear: qkv, attn_out, mlp_in, mlp_out per layer, and "
    "the output head) x tokens, plus per layer 2 x 2 x D x (attended terms: direct positions + "
    "spans, summed over positions and plans) x heads x batch x 3; tokens = batch x L; 2 FLOPs "
    "per multiply-add, and 3 = forward (1) + backward (2), so 6 = 2 x 3. Embeddings, "
    "LayerNorm, softmax, GELU, span summaries and the optimizer are not counted.";

struct FlopCount {
  int64_t linear_weights = 0;  // matmul parameters of the dense layers and the head
  int64_t attended_terms = 0;  // per layer, head and image: direct + span terms over positions
  double dense = 0;            // 6 x linear_weights x tokens
  double attention = 0;        // 12 x D x attended_terms x heads x batch x layers
  double total() const { return dense + attention; }
};

// Weights of every linear layer (torch::nn::Linear, model::Linear) in the model outside its
// attention modules (the DeepSets maps there are D x D per head and left out, as the span
// summaries are).
int64_t linear_weight_count(model::ImageTransformerImpl& model);

// Sum over positions i < length of |direct(i)| + |spans(i)|, over every plan of the variant
// (combiner-mixture computes two). `options` must be resolved and valid for `length`.
int64_t attended_terms(const attention::AttentionOptions& options, int64_t length);

// FLOPs of one training step of `batch` images, by kFlopRule.
FlopCount count_step_flops(model::ImageTransformerImpl& model, int64_t batch);

// Best of `repeats` timings of an n x n by n x n float32 torch::matmul (after one untimed run),
// in GFLOP/s (2 n^3 per product), on LibTorch's current thread count.
double matmul_peak_gflops(int64_t n,
                          int64_t repeats,
                          const torch::Device& device = torch::kCPU,
                          torch::ScalarType dtype = torch::kFloat32);

// The best matmul_peak_gflops over n = max_n / 4, max_n / 2 and max_n (sizes below 64 left out
// unless max_n itself is), `repeats` timings each: one size alone can miss the device's rate
// (too small to fill it, or too large for its caches).
double best_matmul_gflops(int64_t max_n,
                          int64_t repeats,
                          const torch::Device& device = torch::kCPU,
                          torch::ScalarType dtype = torch::kFloat32);

struct TrainBenchOptions {
  int64_t steps = 10;          // timed steps; the median is reported
  int64_t warmup = 2;          // untimed steps first
  int64_t threads = -1;        // LibTorch threads; -1 = the config's train.threads (0 = all cores)
  int64_t matmul_size = 2048;  // largest n of the peak measurement (best_matmul_gflops)
  int64_t matmul_repeats = 5;  // timings per size
  std::string memory = "rss";  // CPU peak: rss (resident set) | tensors (bytes of live tensors)
  int64_t profile_top = 0;     // > 0: profile `steps` more steps, print the top rows (profile.h)
  std::string trace;           // with profile_top: also write the Chrome trace here
  bool count = false;          // count one more step's launches (tools/launch_count.h)
  bool cuda_graph = false;     // also time the step captured as a CUDA graph and replayed
};

struct TrainBenchResult {
  std::string dataset, attention;
  int64_t length = 0, batch = 0, layers = 0, width = 0, heads = 0, parameters = 0;
  int64_t threads = 0, steps = 0;
  std::string device, precision;    // where the step ran; train.precision there (auto resolved)
  double ms_per_step = 0;           // median over the timed steps
  double captured_ms_per_step = 0;  // with cuda_graph: the median replay of the captured step
  std::string captured_error;       // with cuda_graph: why the capture failed, if it did
  // with cuda_graph: the captured step's loss and gradient norm against the step launched op by
  // op, relative, from the same weights, batches and dropout seed (learning rate 0)
  double captured_loss_diff = 0, captured_norm_diff = 0;
  double tokens_per_s = 0;   // batch x L / median step time
  FlopCount flops;           // per step
  double matmul_gflops = 0;  // max of the two below: same device and dtype as the step's matmuls
  double matmul_gflops_before = 0, matmul_gflops_after = 0;  // best_matmul_gflops around steps
  double mfu = 0;                                            // flops.total() / median step / peak
  // CUDA: the caching allocator's peak during the steps; CPU: the process's peak resident set
  // (model, optimizer state, activations and the runtime, all of it), or with memory "tensors"
  // the peak bytes of live tensors during the steps (what a GPU's allocator would count).
  double peak_mib = 0;
  std::string memory_plan;  // what backward recomputes, and for auto why (memory_plan.h)
  // The plan's step measured at 1 to 3 images, the peak it predicts for this batch with the
  // weights (as peak_mib counts them); 0 where peak_mib is the resident set (not comparable).
  double estimated_peak_mib = 0;
  double reserved_peak_mib = 0;    // CUDA: the caching allocator's reserved peak during the steps
  UpdateCheck update_check;        // run before timing (train/step_checks.h)
  AttentionCheck attention_check;  // the config's variant on the step's device and dtype
  std::string checks;              // describe() of both
};

// Builds the model of a validated config and runs warmup + steps training steps on random
// uint8 images, batch = train.batch_size in train.grad_accum micro-batches, at a constant
// learning rate train.lr. Before timing, runs check_update and check_attention on the device
// and throws std::runtime_error if either disagrees (update: max abs diff > 1e-4); a check that
// throws is reported in `checks` and the step is still timed. Throws std::invalid_argument for
// bad options.
TrainBenchResult run_train_bench(const config::Config& config, const TrainBenchOptions& options);

// One human line: ms/step, tokens/s, GFLOP/step, the peak and MFU.
std::string summary_line(const TrainBenchResult& r);

// The --out table: a header and one row per result.
std::string train_csv_header();
std::string train_csv_row(const TrainBenchResult& r);

}  // namespace combiner::train
