#include "train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "attention/attention.h"
#include "data/dataset.h"
#include "model/transformer.h"
#include "sample/sampler.h"
#include "train/batch_loader.h"
#include "train/bits.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/evaluate.h"
#include "train/metrics_log.h"
#include "train/optimizer.h"
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

// AdamW's moments where the parameters are; checkpoints hold them on the CPU.
void move_optimizer_state(torch::optim::AdamW& optimizer, const torch::Device& device) {
  for (auto& entry : optimizer.state()) {
    auto& s = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    s.exp_avg(s.exp_avg().to(device));
    s.exp_avg_sq(s.exp_avg_sq().to(device));
    if (s.max_exp_avg_sq().defined()) s.max_exp_avg_sq(s.max_exp_avg_sq().to(device));
  }
}

std::vector<char> optimizer_bytes(torch::optim::AdamW& optimizer, const torch::Device& device) {
  if (device.is_cpu()) return capture_optimizer(optimizer);
  move_optimizer_state(optimizer, torch::kCPU);
  auto bytes = capture_optimizer(optimizer);
  move_optimizer_state(optimizer, device);
  return bytes;
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

// Dropout seed of one rank at one step when several processes train: the ranks draw different
// masks, and a run resumed with as many processes draws the same ones again.
uint64_t dropout_seed(int64_t seed, int64_t step, int64_t rank) {
  return static_cast<uint64_t>(seed) * 1000003ULL + static_cast<uint64_t>(step) * 65537ULL +
         static_cast<uint64_t>(rank) + 1;
}

void prepare_run_folder(const config::Config& config, bool resume) {
  const auto& dir = config.train.out_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create run folder: " + ec.message());
  if (!resume && !list_checkpoints(dir).empty())
    throw std::invalid_argument("train.out_dir: " + dir +
                                " already holds checkpoints; pass --resume to continue that run "
                                "or choose another train.out_dir");
  const std::string path = (fs::path(dir) / "config.yaml").string();
  std::ofstream out(path);
  out << config::to_yaml(config);
  if (!out.flush()) throw std::runtime_error(path + ": cannot write (is the run folder writable?)");
}

}  // namespace

RunResult run_training(const config::Config& config, const RunOptions& options) {
  const auto& t = config.train;
  check_batch_split(t, options.launch.world_size);
  const auto device = resolve_device(t.device, options.launch);
  const Distributed dist(
      options.launch, device, DistributedOptions{std::chrono::seconds(t.dist_timeout_s)});
  if (!dist.is_main()) spdlog::set_level(spdlog::level::err);  // rank 0 alone logs
  const int64_t threads = util::set_threads(threads_for(t.threads, options.launch));
  if (dist.is_main()) prepare_run_folder(config, options.resume);

  // A packed ImageNet-64 file is mapped at once and its checksum verified in the background;
  // no checkpoint is written before that check has passed.
  const auto data_start = Clock::now();
  data::TrainVal sets = data::load_train_val(config.data, data::PackedFile::Verify::kBackground);
  const data::ImageSet& train_set = sets.train;
  std::optional<data::ImageSet> val_set;
  if (sets.val.count > 0) val_set = std::move(sets.val);
  std::optional<data::ImageSet> test_set;  // a packed one now, the published files at the end
  if (t.final_test) test_set = data::map_packed_split(config.data, data::Split::kTest);
  const int64_t L = train_set.shape.length();
  const int64_t eval_batch = t.eval_batch_size > 0 ? t.eval_batch_size : t.batch_size;

  torch::manual_seed(static_cast<uint64_t>(t.seed));
  model::ImageTransformer model(model::TransformerOptions::from_config(config));
  model->to(device);
  if (t.attention_path == "composed") {  // the fused kernels' reference run (train.attention_path)
    for (const auto& module : model->modules())
      if (auto* layer = dynamic_cast<attention::AttentionImpl*>(module.get()))
        layer->set_path(attention::AttentionImpl::Path::kComposed);
    spdlog::info("train.attention_path composed: every attention layer runs the LibTorch path");
  }
  auto optimizer = make_optimizer(model, t);
  BatchLoader loader(train_set, t.seed, device);
  int64_t step = 0, samples_seen = 0;
  NamedTensors ema;  // empty unless train.ema_decay > 0

  if (options.resume) {
    auto [path, ckpt] = checkpoint_to_resume(t.out_dir, dist);
    restore_model(*model, ckpt.model, path);
    check_same_architecture(ckpt, config, path);
    restore_optimizer(*optimizer, ckpt.optimizer);
    move_optimizer_state(*optimizer, device);
    auto generator = at::detail::getDefaultCPUGenerator();  // a handle to the global one
    generator.set_state(ckpt.rng_state);
    step = ckpt.step;
    samples_seen = ckpt.samples_seen;
    ema = ckpt.ema;
    for (auto& entry : ema) entry.second = entry.second.to(device);
    spdlog::info("resumed from {} at step {}", path, step);
  }
  dist.broadcast_parameters(*model);  // every rank starts from rank 0's weights
  spdlog::info(
      "{}: {} train images, {} val, L = {}, ready in {:.2f}s; {} layers x {} wide, {} heads, "
      "attention {}",
      config.data.dataset,
      train_set.count,
      val_set ? val_set->count : 0,
      L,
      std::chrono::duration<double>(Clock::now() - data_start).count(),
      config.model.layers,
      config.model.width,
      config.model.heads,
      config.model.attention.type);
  spdlog::info("{} parameters, {} threads, {}, device {}, AdamW update {}, run folder {}",
               model::parameter_count(*model),
               threads,
               util::allocator().describe(),
               device.str(),
               adamw_kernel(device),
               t.out_dir);
  if (device.is_cpu() && t.precision == "bfloat16")
    spdlog::warn(
        "train.precision bfloat16 on the CPU: Debian's LibTorch 1.13 multiplies bf16 "
        "matrices about 30x slower than fp32 here (docs/PERFORMANCE.md); use float32");
  if (dist.world_size() > 1)
    spdlog::info("data parallel: {} processes over {}, {} images each per step",
                 dist.world_size(),
                 dist.backend(),
                 t.batch_size / dist.world_size());

  if (t.ema_decay > 0 && ema.empty()) ema = start_ema(*model);
  std::optional<MetricsLog> metrics;  // rank 0 alone writes the run folder
  if (dist.is_main()) metrics.emplace((fs::path(t.out_dir) / "metrics.jsonl").string());
  // A new event file per invocation, starting at the first step this one logs: a resumed run
  // never repeats the steps up to its checkpoint. The resolved config goes there too, so a resume
  // with new settings (--set) shows them in the Text dashboard from the step they apply to.
  std::optional<TensorBoardLog> tensorboard;
  if (dist.is_main() && t.tensorboard) {
    const int64_t first_logged = step == 0 ? 0 : step + 1;
    tensorboard.emplace(tensorboard_folder(t.out_dir), first_logged, true);
    tensorboard->text("config", first_logged, config_markdown(config::to_yaml(config)));
  }
  auto save = [&] {
    train_set.check_integrity(/*wait=*/true);  // never a checkpoint trained on a corrupt file
    Checkpoint c{config::to_yaml(config),
                 step,
                 samples_seen,
                 capture_model(*model),
                 optimizer_bytes(*optimizer, device),
                 at::detail::getDefaultCPUGenerator().get_state(),
                 ema};
    const auto path = checkpoint_path(t.out_dir, step);
    save_checkpoint(path, c);
    prune_checkpoints(t.out_dir, t.keep_checkpoints);  // only after the new one is complete
  };

  RunResult result;
  int64_t nonfinite_in_a_row = 0;
  int64_t skipped_since_log = 0;
  model->train();
  // Rank r's share of the global batch [samples_seen, samples_seen + batch_size) is the
  // contiguous slice starting at r * per_rank, taken in grad_accum micro-batches.
  const int64_t per_rank = t.batch_size / dist.world_size();
  const int64_t micro = per_rank / t.grad_accum;
  auto position = [&](int64_t seen, int64_t m) {
    return seen + dist.rank() * per_rank + m * micro;
  };
  const auto start = Clock::now();
  const int64_t first_step = step;
  const int64_t last_step =
      options.stop_after > 0 ? std::min(t.steps, step + options.stop_after) : t.steps;
  while (step < last_step) {
    const auto step_start = Clock::now();
    const double lr = learning_rate(t, step);
    set_learning_rate(*optimizer, lr);
    if (dist.world_size() > 1) torch::manual_seed(dropout_seed(t.seed, step, dist.rank()));
    optimizer->zero_grad();
    // The loss stays on the device until the one read-back below (in double, as before).
    auto step_bits = torch::zeros({1}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    const bool poisoned =
        std::count(options.nan_loss_steps.begin(), options.nan_loss_steps.end(), step);
    for (int64_t m = 0; m < t.grad_accum; ++m) {
      // The loader gathers the next micro-batch (this step's next, or the next step's first)
      // while this one runs.
      const int64_t next = m + 1 < t.grad_accum   ? position(samples_seen, m + 1)
                           : step + 1 < last_step ? position(samples_seen + t.batch_size, 0)
                                                  : -1;
      auto x = loader.take(position(samples_seen, m), micro, next);
      auto loss = mean_bits(model->forward(x), x);
      if (poisoned) loss = loss * std::numeric_limits<double>::quiet_NaN();
      (loss / double(t.grad_accum)).backward();
      step_bits += loss.detach().to(torch::kDouble) / double(t.grad_accum);
    }
    samples_seen += t.batch_size;
    dist.all_reduce_gradients(*model);  // the mean over ranks: the whole global batch's gradient
    dist.all_reduce_sum(step_bits);
    const double max_norm = t.grad_clip > 0 ? t.grad_clip : std::numeric_limits<double>::infinity();
    const auto norm = clip_gradients(model->parameters(), max_norm);
    // The step's one host sync: loss and gradient norm in one copy, for the skip and the log.
    const auto numbers = torch::cat({step_bits, norm.to(step_bits.options()).reshape({1})}).cpu();
    const double train_bits = numbers[0].item<double>() / double(dist.world_size());
    const double grad_norm = numbers[1].item<double>();
    // Every rank sees the same all-reduced loss and gradients, so all skip together.
    if (std::isfinite(train_bits) && std::isfinite(grad_norm)) {
      adamw_step(*optimizer);
      if (!ema.empty()) update_ema(ema, *model, t.ema_decay);
      nonfinite_in_a_row = 0;
    } else {
      ++result.skipped_steps;
      ++skipped_since_log;
      ++nonfinite_in_a_row;
      spdlog::warn(
          "step {:>6} | non-finite loss {} or gradient norm {}: update skipped ({} in a row, "
          "{} in this run)",
          step + 1,
          train_bits,
          grad_norm,
          nonfinite_in_a_row,
          result.skipped_steps);
      if (nonfinite_in_a_row >= t.max_nonfinite_steps)
        throw std::runtime_error(fmt::format(
            "train: {} updates in a row had a non-finite loss or gradient (steps {} to {}; "
            "train.max_nonfinite_steps = {}); stopped without writing a checkpoint, so the last "
            "one in {} holds the state before them: lower train.lr or train.grad_clip, then "
            "--resume",
            nonfinite_in_a_row,
            step + 2 - nonfinite_in_a_row,
            step + 1,
            t.max_nonfinite_steps,
            t.out_dir));
    }
    ++step;
    train_set.check_integrity(/*wait=*/false);  // stops the run once a background check fails

    const double step_s = std::chrono::duration<double>(Clock::now() - step_start).count();
    const double tokens_per_s = double(t.batch_size * L) / step_s;
    if (metrics)
      metrics->write({{"step", double(step)},
                      {"train_bpd", train_bits},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"tokens_per_s", tokens_per_s}});
    if (step % t.log_every == 0 || step == t.steps) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double eta = elapsed / double(step - first_step) * double(t.steps - step);
      spdlog::info(
          "step {:>6}/{} | train bpd {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s "
          "| ETA {:.0f}s",
          step,
          t.steps,
          train_bits,
          lr,
          grad_norm,
          tokens_per_s,
          eta);
      if (tensorboard)
        tensorboard->train(step, {train_bits, lr, grad_norm, tokens_per_s, skipped_since_log});
      skipped_since_log = 0;
    }
    if (val_set && t.eval_every > 0 && step % t.eval_every == 0) {
      const auto val = evaluate(model, *val_set, eval_batch, false, dist);  // sharded over ranks
      if (metrics) metrics->write({{"step", double(step)}, {"val_bpd", val.bits_per_dim}});
      if (tensorboard) tensorboard->scalar("val/bpd", step, val.bits_per_dim);
      spdlog::info("step {:>6} | val bpd {:.4f} ({} images)", step, val.bits_per_dim, val.images);
    }
    // Rank 0's work alone; the others wait for it without the collectives' timeout.
    if (t.sample_every > 0 && step % t.sample_every == 0)
      dist.run_on_main([&] {
        sample::SampleOptions s;
        s.count = t.sample_count;
        s.seed = t.seed;
        const auto path = (fs::path(t.out_dir) / fmt::format("samples-{:08d}.png", step)).string();
        const auto grid = util::image_grid_png(path, sample::sample_images(model, s), 2);
        util::write_png(path, grid);
        if (tensorboard) tensorboard->image("samples", step, grid);
        spdlog::info("step {:>6} | samples written to {}", step, path);
      });
    if (t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step < t.steps)
      dist.run_on_main(save);
    // A stop request on any rank stops them all after this same step.
    result.stop_signal = static_cast<int>(dist.max_over_ranks(util::stop_requested()));
    if (result.stop_signal != 0 && step < last_step) break;
  }
  result.main_process = dist.is_main();
  result.final_checkpoint = checkpoint_path(t.out_dir, step);
  dist.run_on_main(save);  // no rank returns before the final checkpoint is on disk
  if (result.stop_signal != 0 && step < last_step) {
    spdlog::warn("stopped by signal {} after step {}: checkpoint {}; continue with --resume",
                 result.stop_signal,
                 step,
                 result.final_checkpoint);
    return result;
  }
  result.stop_signal = 0;
  if (t.final_test && step == t.steps) {
    if (!test_set) test_set = data::load_split(config.data, data::Split::kTest);
    const auto test = evaluate(model, *test_set, eval_batch, false, dist);
    if (metrics) metrics->write({{"step", double(step)}, {"test_bpd", test.bits_per_dim}});
    if (tensorboard) tensorboard->scalar("test/bpd", step, test.bits_per_dim);
    spdlog::info("test bpd {:.4f} over {} images", test.bits_per_dim, test.images);
    result.test_bits_per_dim = test.bits_per_dim;
  }
  spdlog::info("peak resident memory {:.0f} MiB", util::process_peak_rss_mib());
  return result;
}

}  // namespace combiner::train
