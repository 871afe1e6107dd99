#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>

#include "attention/attention.h"
#include "data/dataset.h"
#include "model/transformer.h"
#include "sample/sampler.h"
#include "train/batch_loader.h"
#include "train/bits.h"
#include "train/captured_step.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/evaluate.h"
#include "train/memory_plan.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
#include "train/optimizer_state.h"
#include "train/run_folder.h"
#include "train/schedule.h"
#include "train/tensorboard_log.h"
#include "util/device.h"
#include "util/image_io.h"
#include "util/runtime.h"
#include "util/stop_signal.h"

namespace combiner::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The newest checkpoint that loads; corrupt ones are skipped with a warning.
std::optional<std::pair<std::string, Checkpoint>> newest_valid_checkpoint(const std::string& dir) {
  auto paths = list_checkpoints(dir);
  for (auto it = paths.rbegin(); it != paths.rend(); ++it) {
    try {
      return std::make_pair(*it, load_checkpoint(*it));
    } catch (const std::exception& e) {
      spdlog::warn("skipping checkpoint: {}", e.what());
    }
  }
  return std::nullopt;
}

// The checkpoint to resume from: rank 0 picks the newest that loads and tells the others its
// step; they read the same file (the run folder is shared).
std::pair<std::string, Checkpoint> checkpoint_to_resume(const std::string& dir,
                                                        const Distributed& dist) {
  std::optional<std::pair<std::string, Checkpoint>> found;
  if (dist.is_main()) found = newest_valid_checkpoint(dir);
  auto step_plus_one = torch::tensor({found ? found->second.step + 1 : int64_t{0}}, torch::kLong);
  dist.all_reduce_sum(step_plus_one);
  const int64_t step = step_plus_one.item<int64_t>() - 1;
  if (step < 0) throw std::runtime_error("--resume: no valid checkpoint in " + dir);
  if (found) return std::move(*found);
  const auto path = checkpoint_path(dir, step);
  return {path, load_checkpoint(path)};
}

// train.batch_size is the global batch: every rank's micro-batches are the same size.
void check_batch_split(const config::TrainConfig& t, int64_t world_size) {
  if (t.batch_size % (world_size * t.grad_accum) != 0)
    throw std::invalid_argument("train.batch_size: " + std::to_string(t.batch_size) +
                                " images per step must divide by WORLD_SIZE (" +
                                std::to_string(world_size) + ") x train.grad_accum (" +
                                std::to_string(t.grad_accum) +
                                ") = " + std::to_string(world_size * t.grad_accum));
}

// Dropout seed of one rank at one step when several processes train, or one trains on a GPU: the
// ranks draw different masks, and a run resumed with as many processes draws the same ones again
// (a checkpoint keeps the CPU generator's state, not a GPU's).
uint64_t dropout_seed(int64_t seed, int64_t step, int64_t rank) {
  return static_cast<uint64_t>(seed) * 1000003ULL + static_cast<uint64_t>(step) * 65537ULL +
         static_cast<uint64_t>(rank) + 1;
}

// What one run holds from its set-up to its end.
struct Run {
  Run(const config::Config& c, const RunOptions& o) : config(c), t(c.train), options(o) {}
  const config::Config& config;
  const config::TrainConfig& t;
  const RunOptions& options;

  torch::Device device = torch::kCPU;
  std::unique_ptr<Distributed> dist;
  std::optional<RunFolderLock> lock;  // rank 0's; released after the logs below close
  int64_t threads = 0;
  data::TrainVal sets;  // sets.train: the training images; val moves out into val_set
  std::optional<data::ImageSet> val_set;
  std::optional<data::ImageSet> test_set;  // when train.final_test: read or mapped at set-up
  double data_seconds = 0;
  std::string bits_note;  // " (5-bit data)" beside every bits/dim of N-bit data; "" at 8 bits
  int64_t L = 0, eval_batch = 0;
  model::ImageTransformer model{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<BatchLoader> loader;
  NamedTensors ema;                   // empty unless train.ema_decay > 0
  std::optional<MetricsLog> metrics;  // rank 0 alone writes the run folder
  std::optional<TensorBoardLog> tensorboard;
  std::unique_ptr<StaticStep> static_step;  // the step a CUDA graph captures, where it can
  MemoryPlan memory;                        // what backward recomputes, and for auto why
  config::TrainConfig step_train;           // t with that plan in its keys (auto resolved)

  int64_t step = 0, samples_seen = 0;     // updates done; images consumed (the global batch each)
  int64_t first_step = 0, last_step = 0;  // this invocation's
  int64_t nonfinite_in_a_row = 0, skipped_since_log = 0;
  Clock::time_point start;
  RunResult result;

  // Rank r's share of the global batch [seen, seen + batch_size) is the contiguous slice starting
  // at r * per_rank, taken in grad_accum micro-batches: micro-batch m's first image.
  int64_t per_rank() const { return t.batch_size / dist->world_size(); }
  int64_t micro() const { return per_rank() / t.grad_accum; }
  int64_t position(int64_t seen, int64_t m) const {
    return seen + dist->rank() * per_rank() + m * micro();
  }
};

// What one update measured.
struct StepNumbers {
  double train_bits = 0, grad_norm = 0, lr = 0, tokens_per_s = 0;
};

// What backward recomputes: the config's plan, or for auto the fastest whose step fits, measured
// on this model before anything else is on the device; every rank takes the most frugal plan any
// rank needs.
void choose_memory_plan(Run& r) {
  r.memory =
      choose_plan(*r.model, r.t, r.micro(), optimizer_state_mib(*r.model, r.t.ema_decay > 0));
  if (r.memory.automatic) {
    const auto agreed = static_cast<Recompute>(r.dist->max_over_ranks(int64_t(r.memory.plan)));
    if (agreed != r.memory.plan) r.memory.plan = agreed, r.memory.fits = true;
  }
  apply_plan(*r.model, r.memory.plan);
  r.step_train = with_plan(r.t, r.memory.plan);
}

// Device, processes, threads, data, model, optimizer and loader. Every split the run reads is
// opened and checked here, before the first step and before anything is written to the run
// folder, which is only checked, and locked if it exists (write_run_folder comes after --resume's
// checkpoint has loaded).
void set_up(Run& r) {
  const auto& t = r.t;
  check_batch_split(t, r.options.launch.world_size);
  r.device = resolve_device(t.device, r.options.launch);
  r.dist = std::make_unique<Distributed>(
      r.options.launch, r.device, DistributedOptions{std::chrono::seconds(t.dist_timeout_s)});
  if (!r.dist->is_main()) spdlog::set_level(spdlog::level::err);  // rank 0 alone logs
  r.threads = util::set_threads(threads_for(t.threads, r.options.launch));
  if (r.dist->is_main()) r.lock = check_run_folder(t.out_dir, r.options.resume);

  // A packed ImageNet-64 file is mapped at once and its checksum verified in the background;
  // no checkpoint is written before that check has passed.
  const auto data_start = Clock::now();
  r.sets = data::load_train_val(r.config.data, data::PackedFile::Verify::kBackground);
  if (r.sets.val.count > 0) r.val_set = std::move(r.sets.val);
  if (t.final_test)
    r.test_set =
        data::load_split(r.config.data, data::Split::kTest, data::PackedFile::Verify::kBackground);
  r.data_seconds = std::chrono::duration<double>(Clock::now() - data_start).count();
  r.L = r.sets.train.shape.length();
  if (r.sets.train.bits < 8) r.bits_note = fmt::format(" ({}-bit data)", r.sets.train.bits);
  r.eval_batch = t.eval_batch_size > 0 ? t.eval_batch_size : t.batch_size;

  torch::manual_seed(static_cast<uint64_t>(t.seed));
  r.model = model::ImageTransformer(model::TransformerOptions::from_config(r.config));
  r.model->to(r.device);
  model::set_kernel_path(*r.model, t.attention_path);
  if (t.attention_path == "composed")  // the fused kernels' reference run
    spdlog::info(
        "train.attention_path composed: every attention layer and LayerNorm runs the "
        "LibTorch path");
  if (t.attention_path == "fused")
    spdlog::info(
        "train.attention_path fused: every fused variant and LayerNorm runs its fused "
        "path{}",
        r.device.is_cpu() ? " (the kernels' CPU model: slow)" : "");
  r.optimizer = make_optimizer(r.model, t);
  choose_memory_plan(r);
  r.loader = std::make_unique<BatchLoader>(r.sets.train, t.seed, r.device);
}

// --resume: weights, optimizer, random state, step and EMA from the newest valid checkpoint.
void resume(Run& r) {
  auto [path, ckpt] = checkpoint_to_resume(r.t.out_dir, *r.dist);
  restore_model(*r.model, ckpt.model, path);
  check_same_architecture(ckpt, r.config, path);
  restore_optimizer(*r.optimizer, ckpt, path);
  move_adamw_state(*r.optimizer, r.device);
  auto generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
  generator.set_state(ckpt.rng_state);
  r.step = ckpt.step;
  r.samples_seen = ckpt.samples_seen;
  r.ema = ckpt.ema;
  for (auto& entry : r.ema) entry.second = entry.second.to(r.device);
  spdlog::info("resumed from {} at step {}{}",
               path,
               r.step,
               ckpt.written_by.empty() || ckpt.written_by == torch_build_name()
                   ? ""
                   : " (written by " + ckpt.written_by + ")");
}

// The run folder written (every input has passed); every rank on rank 0's weights; what runs
// where, said once; the logs opened; the clock started.
void start(Run& r) {
  const auto& t = r.t;
  if (r.dist->is_main()) write_run_folder(r.config, r.options.resume, r.lock);
  r.dist->broadcast_parameters(*r.model);
  spdlog::info(
      "{}: {} train images, {} val, L = {}, ready in {:.2f}s; {} layers x {} wide, {} heads, "
      "attention {}",
      r.config.data.dataset,
      r.sets.train.count,
      r.val_set ? r.val_set->count : 0,
      r.L,
      r.data_seconds,
      r.config.model.layers,
      r.config.model.width,
      r.config.model.heads,
      r.config.model.attention.type);
  spdlog::info("{} parameters, {} threads, {}, device {}, AdamW update {}, run folder {}",
               model::parameter_count(*r.model),
               r.threads,
               util::allocator().describe(),
               r.device.str(),
               adamw_kernel(r.device),
               t.out_dir);
  if (t.precision == "auto")
    spdlog::info("train.precision auto: {} on {}",
                 config::precision_on(t, r.device.is_cuda()) == "bfloat16"
                     ? "bfloat16 autocast (fp32 weights, softmax, logits)"
                     : "float32",
                 r.device.str());
  if (r.device.is_cpu() && t.precision == "bfloat16")
    spdlog::warn(
        "train.precision bfloat16 on the CPU: a GPU's numerics (bf16 operands, float32 sums), "
        "1.4 to 1.7x float32's step time here; float32 (or auto) for speed");
  if (r.memory.automatic) {
    const auto line = r.memory.describe(r.device.str());
    if (r.memory.fits)
      spdlog::info("{}", line);
    else
      spdlog::warn("{}", line);
  }
  if (r.dist->world_size() > 1)
    spdlog::info("data parallel: {} processes over {}, {} images each per step",
                 r.dist->world_size(),
                 r.dist->backend(),
                 r.per_rank());

  if (t.ema_decay > 0 && r.ema.empty()) r.ema = start_ema(*r.model);
  if (r.dist->is_main()) r.metrics.emplace((fs::path(t.out_dir) / "metrics.jsonl").string());
  // A new event file per invocation, starting at the first step this one logs: a resumed run
  // never repeats the steps up to its checkpoint. The resolved config goes there too, so a resume
  // with new settings (--set) shows them in the Text dashboard from the step they apply to.
  if (r.dist->is_main() && t.tensorboard) {
    const int64_t first_logged = r.step == 0 ? 0 : r.step + 1;
    r.tensorboard.emplace(tensorboard_folder(t.out_dir), first_logged, true);
    r.tensorboard->text("config", first_logged, config_markdown(config::to_yaml(r.config)));
  }
  // Made after --resume and the EMA's start: the captured step holds the addresses of the
  // weights, AdamW's moments and the averages.
  const auto why_not = StaticStep::why_not_captured(r.step_train, r.device, r.dist->world_size());
  if (why_not.empty() || (r.options.uncaptured_static_step && r.dist->world_size() == 1))
    r.static_step = std::make_unique<StaticStep>(
        r.model, *r.optimizer, r.ema, r.step_train, r.micro(), r.L, why_not.empty());
  if (r.device.is_cuda())
    spdlog::info(why_not.empty() ? "training step: captured as a CUDA graph at the first step, "
                                   "then replayed (train.cuda_graph auto)"
                                 : "training step: launched op by op ({})",
                 why_not);
  r.model->train();
  r.start = Clock::now();
  r.first_step = r.step;
  r.last_step =
      r.options.stop_after > 0 ? std::min(t.steps, r.step + r.options.stop_after) : t.steps;
}

// Rank 0's checkpoint of the state after r.step updates.
void save(Run& r) {
  r.sets.train.check_integrity(/*wait=*/true);  // never a checkpoint trained on a corrupt file
  Checkpoint c{config::to_yaml(r.config),
               r.step,
               r.samples_seen,
               capture_model(*r.model),
               adamw_state_bytes(*r.optimizer),
               at::detail::getDefaultCPUGenerator().get_state(),
               r.ema};
  save_checkpoint(checkpoint_path(r.t.out_dir, r.step), c);
  prune_checkpoints(r.t.out_dir, r.t.keep_checkpoints);  // only after the new one is complete
}

// What one update read back: its loss and gradient norm, and whether it ran.
struct Update {
  double bits = 0, grad_norm = 0;
  bool ran = false;
};

// The micro-batch of this step that starts at image `m` x micro, on the device. The loader
// gathers the next one (this step's next, or the next step's first) while this one runs.
torch::Tensor micro_batch(Run& r, int64_t m) {
  const auto& t = r.t;
  const int64_t next = m + 1 < t.grad_accum       ? r.position(r.samples_seen, m + 1)
                       : r.step + 1 < r.last_step ? r.position(r.samples_seen + t.batch_size, 0)
                                                  : -1;
  return r.loader->take(r.position(r.samples_seen, m), r.micro(), next);
}

// The global batch in micro-batches launched op by op, gradients averaged over ranks, clipped,
// and AdamW, unless the loss or the gradient norm is not finite.
Update eager_update(Run& r, double lr, bool poisoned) {
  const auto& t = r.t;
  set_learning_rate(*r.optimizer, lr);
  r.optimizer->zero_grad();
  // The loss stays on the device until the one read-back below (in double, as before).
  torch::Tensor step_bits;
  for (int64_t m = 0; m < t.grad_accum; ++m) {
    auto x = micro_batch(r, m);
    auto loss = r.model->mean_bits(x);
    if (poisoned) loss = loss * std::numeric_limits<double>::quiet_NaN();
    backward_share(loss, t.grad_accum, step_bits);
  }
  r.dist->all_reduce_gradients(*r.model);  // the mean over ranks: the whole global batch's gradient
  r.dist->all_reduce_sum(step_bits);
  const double max_norm = t.grad_clip > 0 ? t.grad_clip : std::numeric_limits<double>::infinity();
  const auto norm = clip_gradients(r.model->parameters(), max_norm);
  // The step's one host sync: loss and gradient norm in one copy, for the skip and the log.
  const auto numbers = torch::cat({step_bits, norm.to(step_bits.options()).reshape({1})}).cpu();
  Update u;
  u.bits = numbers[0].item<double>() / double(r.dist->world_size());
  u.grad_norm = numbers[1].item<double>();
  // Every rank sees the same all-reduced loss and gradients, so all skip together.
  u.ran = std::isfinite(u.bits) && std::isfinite(u.grad_norm);
  if (u.ran) {
    adamw_step(*r.optimizer);
    if (!r.ema.empty()) update_ema(r.ema, *r.model, t.ema_decay);
  }
  return u;
}

// The same update as one replay of the captured step (train/captured_step.h), which decides
// the skip on the device; one process.
Update static_update(Run& r, double lr, bool poisoned, std::optional<uint64_t> seed) {
  std::vector<torch::Tensor> batches;
  for (int64_t m = 0; m < r.t.grad_accum; ++m) batches.push_back(micro_batch(r, m));
  const bool first = r.step == r.first_step;
  const auto n = r.static_step->run(batches, lr, poisoned, seed);
  if (first && !r.static_step->capture_error().empty())
    spdlog::warn("training step: the CUDA graph capture failed ({}); every step runs uncaptured",
                 r.static_step->capture_error());
  return {n.bits, n.grad_norm, n.updated};
}

// One update of the global batch, or none when its loss or gradient norm is not finite; so many
// of those in a row stop the run.
StepNumbers train_step(Run& r) {
  const auto& t = r.t;
  const auto step_start = Clock::now();
  StepNumbers n;
  n.lr = learning_rate(t, r.step);
  std::optional<uint64_t> seed;
  if (r.dist->world_size() > 1 || !r.device.is_cpu())
    seed = dropout_seed(t.seed, r.step, r.dist->rank());
  const auto& poison = r.options.nan_loss_steps;
  const bool poisoned = std::count(poison.begin(), poison.end(), r.step);
  Update u;
  if (r.static_step) {
    u = static_update(r, n.lr, poisoned, seed);
  } else {
    if (seed) torch::manual_seed(*seed);
    u = eager_update(r, n.lr, poisoned);
  }
  r.samples_seen += t.batch_size;
  n.train_bits = u.bits;
  n.grad_norm = u.grad_norm;
  if (u.ran) {
    r.nonfinite_in_a_row = 0;
  } else {
    ++r.result.skipped_steps;
    ++r.skipped_since_log;
    ++r.nonfinite_in_a_row;
    spdlog::warn(
        "step {:>6} | non-finite loss {} or gradient norm {}: update skipped ({} in a row, "
        "{} in this run)",
        r.step + 1,
        n.train_bits,
        n.grad_norm,
        r.nonfinite_in_a_row,
        r.result.skipped_steps);
    if (r.nonfinite_in_a_row >= t.max_nonfinite_steps)
      throw std::runtime_error(fmt::format(
          "train: {} updates in a row had a non-finite loss or gradient (steps {} to {}; "
          "train.max_nonfinite_steps = {}); stopped without writing a checkpoint, so the last "
          "one in {} holds the state before them: lower train.lr or train.grad_clip, then "
          "--resume",
          r.nonfinite_in_a_row,
          r.step + 2 - r.nonfinite_in_a_row,
          r.step + 1,
          t.max_nonfinite_steps,
          t.out_dir));
  }
  ++r.step;
  r.sets.train.check_integrity(/*wait=*/false);  // stops the run once a background check fails
  const double step_s = std::chrono::duration<double>(Clock::now() - step_start).count();
  n.tokens_per_s = double(t.batch_size * r.L) / step_s;
  return n;
}

// After an update: its numbers logged, and, when due, validation, a sample grid, a checkpoint.
void after_step(Run& r, const StepNumbers& n) {
  const auto& t = r.t;
  const int64_t step = r.step;
  if (r.metrics)
    r.metrics->write({{"step", double(step)},
                      {"train_bpd", n.train_bits},
                      {"lr", n.lr},
                      {"grad_norm", n.grad_norm},
                      {"tokens_per_s", n.tokens_per_s}});
  if (step % t.log_every == 0 || step == t.steps) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - r.start).count();
    const double eta = elapsed / double(step - r.first_step) * double(t.steps - step);
    spdlog::info(
        "step {:>6}/{} | train bpd {:.4f}{} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s "
        "| ETA {:.0f}s",
        step,
        t.steps,
        n.train_bits,
        r.bits_note,
        n.lr,
        n.grad_norm,
        n.tokens_per_s,
        eta);
    if (r.tensorboard)
      r.tensorboard->train(step,
                           {n.train_bits, n.lr, n.grad_norm, n.tokens_per_s, r.skipped_since_log});
    r.skipped_since_log = 0;
  }
  if (r.val_set && t.eval_every > 0 && step % t.eval_every == 0) {
    const auto val = evaluate(r.model, *r.val_set, r.eval_batch, false, *r.dist);  // sharded
    if (r.metrics) r.metrics->write({{"step", double(step)}, {"val_bpd", val.bits_per_dim}});
    if (r.tensorboard) r.tensorboard->scalar("val/bpd", step, val.bits_per_dim);
    spdlog::info("step {:>6} | val bpd {:.4f}{} ({} images)",
                 step,
                 val.bits_per_dim,
                 r.bits_note,
                 val.images);
  }
  // Rank 0's work alone; the others wait for it without the collectives' timeout.
  if (t.sample_every > 0 && step % t.sample_every == 0)
    r.dist->run_on_main([&] {
      sample::SampleOptions s;
      s.count = t.sample_count;
      s.seed = t.seed;
      const auto path = (fs::path(t.out_dir) / fmt::format("samples-{:08d}.png", step)).string();
      const auto images = sample::sample_images(r.model, s);
      const auto grid =
          util::image_grid_png(path, sample::for_display(images, r.model->options().vocab), 2);
      util::write_png(path, grid);
      if (r.tensorboard) r.tensorboard->image("samples", step, grid);
      spdlog::info("step {:>6} | samples written to {}", step, path);
    });
  if (t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step < t.steps)
    r.dist->run_on_main([&] { save(r); });
}

// A stop request on any rank stops them all after this same step.
bool stop_requested(Run& r) {
  r.result.stop_signal = static_cast<int>(r.dist->max_over_ranks(util::stop_requested()));
  return r.result.stop_signal != 0 && r.step < r.last_step;
}

// The final checkpoint, and at the run's last step the test split's bits/dim.
RunResult finish(Run& r) {
  const auto& t = r.t;
  r.result.main_process = r.dist->is_main();
  r.result.final_checkpoint = checkpoint_path(t.out_dir, r.step);
  r.dist->run_on_main([&] { save(r); });  // no rank returns before it is on disk
  if (r.result.stop_signal != 0 && r.step < r.last_step) {
    spdlog::warn("stopped by signal {} after step {}: checkpoint {}; continue with --resume",
                 r.result.stop_signal,
                 r.step,
                 r.result.final_checkpoint);
    return r.result;
  }
  r.result.stop_signal = 0;
  if (t.final_test && r.step == t.steps) {
    const auto test = evaluate(r.model, *r.test_set, r.eval_batch, false, *r.dist);
    if (r.metrics) r.metrics->write({{"step", double(r.step)}, {"test_bpd", test.bits_per_dim}});
    if (r.tensorboard) r.tensorboard->scalar("test/bpd", r.step, test.bits_per_dim);
    spdlog::info("test bpd {:.4f}{} over {} images", test.bits_per_dim, r.bits_note, test.images);
    r.result.test_bits_per_dim = test.bits_per_dim;
  }
  spdlog::info("peak resident memory {:.0f} MiB", util::process_peak_rss_mib());
  return r.result;
}

}  // namespace

RunResult run_training(const config::Config& config, const RunOptions& options) {
  Run run(config, options);
  set_up(run);
  if (options.resume) resume(run);
  start(run);
  while (run.step < run.last_step) {
    after_step(run, train_step(run));
    if (stop_requested(run)) break;
  }
  return finish(run);
}

}  // namespace combiner::train
