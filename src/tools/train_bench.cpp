// Training-step throughput and model FLOP utilisation. The step is the trainer's (same loss,
// clipping and AdamW grouping) minus data loading and logging; the FLOP count is a formula over
// the model's Linear weights and the attention plans, so it can be checked by hand. Helpers live
// in a named namespace because this folder builds as unity batches.
#include "tools/train_bench.h"

#include <fmt/format.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/plan.h"
#include "tools/launch_count.h"
#include "tools/profile.h"
#include "train/bits.h"
#include "train/captured_step.h"
#include "train/distributed.h"
#include "train/memory_plan.h"
#include "train/optimizer.h"
#include "train/step_checks.h"
#include "util/device.h"
#include "util/runtime.h"

namespace combiner::train {

namespace train_bench_detail {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

bool inside_attention(const std::string& name) {
  return name == "attention" || name.rfind("attention.", 0) == 0 ||
         name.find(".attention.") != std::string::npos ||
         (name.size() >= 10 && name.compare(name.size() - 10, 10, ".attention") == 0);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// "aten::copy_ x12, aten::mm x10, ...": the `top` most called ops, most first.
std::string most_called(const std::map<std::string, int64_t>& ops, size_t top) {
  std::vector<std::pair<int64_t, std::string>> sorted;
  for (const auto& [name, calls] : ops) sorted.emplace_back(calls, name);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::string out;
  for (size_t i = 0; i < sorted.size() && i < top; ++i)
    out += fmt::format("{}{} x{}", i ? ", " : "", sorted[i].second, sorted[i].first);
  return out;
}

}  // namespace train_bench_detail

int64_t linear_weight_count(model::ImageTransformerImpl& model) {
  int64_t n = 0;
  for (const auto& item : model.named_modules()) {
    if (train_bench_detail::inside_attention(item.key())) continue;
    if (auto* linear = item.value()->as<torch::nn::Linear>()) n += linear->weight.numel();
    if (auto* linear = item.value()->as<model::LinearImpl>()) n += linear->weight.numel();
  }
  return n;
}

int64_t attended_terms(const attention::AttentionOptions& options, int64_t length) {
  attention::validate(options, length);
  int64_t terms = 0;
  // One position at a time: make_plans would hold every plan at once (O(L^2) for full).
  for (const auto& name : attention::plan_names(options.type)) {
    for (int64_t i = 0; i < length; ++i) {
      const auto plan = attention::plan_position(name, i, length, options.block, options.row_len);
      terms += int64_t(plan.direct.size() + plan.spans.size());
    }
  }
  return terms;
}

FlopCount count_step_flops(model::ImageTransformerImpl& model, int64_t batch) {
  const auto& o = model.options();
  const double tokens = double(batch) * double(o.length());
  const int64_t head_dim = o.width / o.heads;
  FlopCount f;
  f.linear_weights = linear_weight_count(model);
  f.attended_terms = attended_terms(o.attention, o.length());
  f.dense = 6.0 * double(f.linear_weights) * tokens;
  // Per term: q.k (2 D) and weight x value (2 D) forward; backward is twice forward.
  f.attention = 2.0 * 2.0 * double(head_dim) * double(f.attended_terms) * double(o.heads) *
                double(batch) * 3.0 * double(o.layers);
  return f;
}

double matmul_peak_gflops(int64_t n,
                          int64_t repeats,
                          const torch::Device& device,
                          torch::ScalarType dtype) {
  if (n < 1 || repeats < 1)
    throw std::invalid_argument("matmul peak: size and repeats must be >= 1, got " +
                                std::to_string(n) + " and " + std::to_string(repeats));
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  auto c = torch::matmul(a, b);  // untimed: pages in BLAS and starts its threads
  util::synchronize(device);
  double best = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < repeats; ++r) {
    const auto start = train_bench_detail::Clock::now();
    c = torch::matmul(a, b);
    util::synchronize(device);
    best = std::min(best, train_bench_detail::seconds_since(start));
  }
  return 2.0 * double(n) * double(n) * double(n) / best / 1e9;
}

double best_matmul_gflops(int64_t max_n,
                          int64_t repeats,
                          const torch::Device& device,
                          torch::ScalarType dtype) {
  double best = 0;
  for (int64_t n : {max_n / 4, max_n / 2, max_n})
    if (n >= 64 || n == max_n) best = std::max(best, matmul_peak_gflops(n, repeats, device, dtype));
  return best;
}

TrainBenchResult run_train_bench(const config::Config& config, const TrainBenchOptions& options) {
  if (!options.trace.empty() && options.profile_top < 1)
    throw std::invalid_argument("--trace " + options.trace + ": needs --profile N (N > 0)");
  if (!options.trace.empty() && !tools::can_save_traces())
    throw std::invalid_argument("--trace " + options.trace +
                                ": this LibTorch cannot write traces (no Kineto, as Debian's "
                                "1.13); --profile's table needs none");
  if (options.steps < 1)
    throw std::invalid_argument("--steps must be >= 1, got " + std::to_string(options.steps));
  if (options.warmup < 0)
    throw std::invalid_argument("--warmup must be >= 0, got " + std::to_string(options.warmup));
  if (options.cuda_graph && config.train.activation_checkpointing == "true")
    throw std::invalid_argument(
        "--cuda-graph: train.activation_checkpointing sets the generator's state again in "
        "backward, which a capture cannot hold; set it false (train.recompute_mlp keeps its "
        "masks and can be captured)");
  if (options.memory != "rss" && options.memory != "tensors")
    throw std::invalid_argument("--memory: expected rss or tensors, got " + options.memory);
  const auto& t = config.train;
  TrainBenchResult r;
  r.threads = util::set_threads(options.threads >= 0 ? options.threads : t.threads);
  const torch::Device device = resolve_device(t.device, LaunchEnvironment{});
  if (options.cuda_graph && !device.is_cuda())
    throw std::invalid_argument("--cuda-graph: needs a CUDA device; the step runs on " +
                                device.str() + " (train.device " + t.device + ")");
  r.device = device.str();
  r.precision = config::precision_on(t, device.is_cuda());
  const auto peak_dtype = r.precision == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  // Counted from before the model is built, as a GPU's allocator counts: weights, AdamW state,
  // activations (util/device.h).
  const bool tensors = options.memory == "tensors" && device.is_cpu();
  if (tensors) util::count_cpu_tensor_bytes();
  r.matmul_gflops_before =
      best_matmul_gflops(options.matmul_size, options.matmul_repeats, device, peak_dtype);

  torch::manual_seed(static_cast<uint64_t>(t.seed));
  model::ImageTransformer model(model::TransformerOptions::from_config(config));
  model->to(device);
  model->train();
  model::set_kernel_path(*model, t.attention_path);
  auto optimizer = make_optimizer(model, t);
  const int64_t L = model->options().length();
  const int64_t micro = t.batch_size / t.grad_accum;
  // What backward recomputes, as the trainer decides it (auto measured here the same way). Where
  // the peak below counts tensors, the plan's measured step (train/memory_plan.h) is reported
  // beside it, with the weights, as that peak counts them.
  const double weights_mib = parameter_mib(*model);
  const double state_mib = optimizer_state_mib(*model, false);
  const auto plan = choose_plan(*model, t, micro, state_mib);
  apply_plan(*model, plan.plan);
  const auto step_t = with_plan(t, plan.plan);
  // auto's whole blocks (named ones were refused above): the eager steps alone are timed.
  const bool capture = options.cuda_graph && plan.plan != Recompute::kBlocks;
  if (options.cuda_graph && !capture)
    r.captured_error =
        "not captured: auto chose whole blocks recomputed, which set the "
        "generator's state again in backward";
  r.memory_plan = plan.describe(device.str());
  if (device.is_cuda() || tensors)
    r.estimated_peak_mib =
        weights_mib + (plan.automatic
                           ? plan.estimates.back().needed_mib
                           : state_mib + measure_step_memory(*model, plan.plan).at(micro));
  const auto& o = model->options();
  // A check that disagrees stops the bench; one that cannot run (a variant that refuses the
  // short prefix, say) is reported in the summary line and the step is still timed.
  try {
    r.update_check = check_update(device);
    r.attention_check =
        check_attention(o.attention, L, o.heads, o.width / o.heads, device, peak_dtype);
    r.checks = describe(r.update_check, r.attention_check);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    r.checks = "could not run: " + what.substr(0, what.find('\n'));
    r.attention_check.tolerance = std::numeric_limits<double>::infinity();
  }
  if (!r.update_check.ok() || !r.attention_check.ok())
    throw std::runtime_error("train bench: not timing a step that disagrees with its reference: " +
                             r.checks);
  std::vector<torch::Tensor> batches;  // drawn once: the step times the model, not the RNG
  for (int64_t m = 0; m < t.grad_accum; ++m)
    batches.push_back(
        torch::randint(0, model->options().vocab, {micro, L}, torch::kByte).to(device));
  const double max_norm = t.grad_clip > 0 ? t.grad_clip : std::numeric_limits<double>::infinity();

  // The trainer's step: the loss stays on the device, one read-back of loss and norm. Its two
  // parts are counted apart; `kept_mib`, when given, gets the MiB of tensors the last forward
  // left alive for its backward (the saved activations, with --memory tensors).
  const auto forward_backward = [&](double* kept_mib) {
    optimizer->zero_grad();
    torch::Tensor bits;
    for (const auto& x : batches) {
      const double before = kept_mib != nullptr ? util::device_allocated_mib(device) : 0.0;
      auto loss = model->mean_bits(x);
      if (kept_mib != nullptr) *kept_mib = util::device_allocated_mib(device) - before;
      backward_share(loss, t.grad_accum, bits);
    }
    return bits;
  };
  // Clipping and the update; returns loss and norm on the device, for the step's one read-back.
  const auto update = [&](const torch::Tensor& bits) {
    const auto norm = clip_gradients(model->parameters(), max_norm);
    auto numbers = torch::cat({bits, norm.to(bits.options()).reshape({1})});
    adamw_step(*optimizer);
    return numbers;
  };
  const auto one_step = [&] {
    update(forward_backward(nullptr)).cpu();
    util::synchronize(device);
  };
  util::reset_peak_memory(device);
  std::vector<double> ms;
  for (int64_t step = 0; step < options.warmup + options.steps; ++step) {
    const auto start = train_bench_detail::Clock::now();
    one_step();
    if (step >= options.warmup) ms.push_back(1e3 * train_bench_detail::seconds_since(start));
  }
  r.peak_mib =
      device.is_cuda() || tensors ? util::device_peak_mib(device) : util::process_peak_rss_mib();
  r.reserved_peak_mib = util::device_reserved_peak_mib(device);
  if (options.count) {  // one more step, after the timed ones, counted
    double kept_mib = 0.0;
    const tools::LaunchCounter counter;
    const auto bits = forward_backward(&kept_mib);
    const int64_t model_launches = counter.launches();
    const auto model_ops = counter.ops();
    update(bits).cpu();
    const auto top = train_bench_detail::most_called(counter.ops(), 12);
    const std::string kept =
        tensors ? fmt::format("{:.2f} MiB", kept_mib) : std::string("not counted (--memory rss)");
    std::printf(
        "count of one training step: %lld launches (%lld fused kernels): "
        "forward + backward %lld, clipping + update %lld; kept for backward %s; "
        "most called: %s\n",
        static_cast<long long>(counter.launches()),
        static_cast<long long>(counter.fused()),
        static_cast<long long>(model_launches),
        static_cast<long long>(counter.launches() - model_launches),
        kept.c_str(),
        top.c_str());
    std::printf("forward + backward ops: %s\n",
                train_bench_detail::most_called(model_ops, model_ops.size()).c_str());
  }
  if (options.profile_top > 0) {  // more steps, after the timed ones: timings stay unperturbed
    const auto rows = tools::profile(
        [&] {
          for (int64_t step = 0; step < options.steps; ++step) one_step();
        },
        device.is_cuda(),
        options.trace);
    std::printf("profile of %lld training steps:\n%s",
                static_cast<long long>(options.steps),
                tools::profile_table(rows, int(options.profile_top), options.steps).c_str());
  }
  if (capture) {  // the trainer's captured step, its replays timed after the eager steps
    // A capture that fails (an op that waits for the host, memory) is reported, not fatal: the
    // eager steps' numbers stand.
    NamedTensors no_ema;
    StaticStep captured(model, *optimizer, no_ema, step_t, micro, L, /*capture=*/true);
    // First, the captured step against the one launched op by op at learning rate 0 (the weights
    // stay as they are): the same batches and dropout seed give the same loss and norm.
    const uint64_t seed = 20211206;
    const auto replayed = captured.run(batches, 0.0, /*poisoned=*/false, seed);
    torch::manual_seed(seed);
    const double eager_bits = forward_backward(nullptr).item<double>();
    const double eager_norm = clip_gradients(model->parameters(), max_norm).item<double>();
    r.captured_loss_diff = std::abs(replayed.bits - eager_bits) / std::abs(eager_bits);
    r.captured_norm_diff = std::abs(replayed.grad_norm - eager_norm) / std::abs(eager_norm);
    std::vector<double> replays;
    for (int64_t step = 0; captured.captured() && step < options.warmup + options.steps; ++step) {
      const auto start = train_bench_detail::Clock::now();
      captured.run(batches, t.lr, /*poisoned=*/false, std::nullopt);  // reads loss and norm back
      util::synchronize(device);
      if (step >= options.warmup) replays.push_back(1e3 * train_bench_detail::seconds_since(start));
    }
    if (captured.captured())
      r.captured_ms_per_step = train_bench_detail::median(replays);
    else
      r.captured_error = captured.capture_error();
  }
  r.ms_per_step = train_bench_detail::median(ms);

  r.dataset = config.data.dataset;
  r.attention = config.model.attention.type;
  r.length = L;
  r.batch = t.batch_size;
  r.layers = config.model.layers;
  r.width = config.model.width;
  r.heads = config.model.heads;
  r.parameters = model::parameter_count(*model);
  r.steps = options.steps;
  r.tokens_per_s = double(r.batch * L) / (r.ms_per_step / 1e3);
  r.flops = count_step_flops(*model, r.batch);
  r.matmul_gflops_after =
      best_matmul_gflops(options.matmul_size, options.matmul_repeats, device, peak_dtype);
  r.matmul_gflops = std::max(r.matmul_gflops_before, r.matmul_gflops_after);
  r.mfu = r.flops.total() / (r.ms_per_step / 1e3) / (r.matmul_gflops * 1e9);
  return r;
}

std::string summary_line(const TrainBenchResult& r) {
  char line[1024];
  std::snprintf(
      line,
      sizeof line,
      "train bench: %s L=%lld, %lld layers x %lld wide, %lld heads, %s, batch %lld, "
      "%s, %s, %lld threads: %.1f ms/step (median of %lld), %.0f tokens/s, %.3f GFLOP/step, "
      "%s matmul peak %.1f GFLOP/s (best before the steps %.1f, after %.1f), MFU %.1f%%, "
      "peak memory %.0f MiB (%s); checks: %s",
      r.dataset.c_str(),
      static_cast<long long>(r.length),
      static_cast<long long>(r.layers),
      static_cast<long long>(r.width),
      static_cast<long long>(r.heads),
      r.attention.c_str(),
      static_cast<long long>(r.batch),
      r.device.c_str(),
      r.precision.c_str(),
      static_cast<long long>(r.threads),
      r.ms_per_step,
      static_cast<long long>(r.steps),
      r.tokens_per_s,
      r.flops.total() / 1e9,
      r.precision.c_str(),
      r.matmul_gflops,
      r.matmul_gflops_before,
      r.matmul_gflops_after,
      100.0 * r.mfu,
      r.peak_mib,
      util::allocator().describe().c_str(),
      r.checks.c_str());
  std::string out = line;
  out += "; memory: " + r.memory_plan;
  if (r.estimated_peak_mib > 0)
    out += fmt::format(
        ", its step measured at 1 to 3 images predicts a peak of {:.0f} MiB "
        "({:.2f}x the peak above)",
        r.estimated_peak_mib,
        r.estimated_peak_mib / r.peak_mib);
  if (r.reserved_peak_mib > 0)
    out += fmt::format(" (the allocator reserved {:.0f} MiB at its peak)", r.reserved_peak_mib);
  if (!r.captured_error.empty())
    out += "; captured as a CUDA graph: failed (" + r.captured_error + ")";
  if (r.captured_ms_per_step > 0)
    out += fmt::format(
        "; captured as a CUDA graph: {:.1f} ms/step, {:.0f} tokens/s ({:.2f}x); its loss and "
        "norm against the step launched op by op: {:.1e} and {:.1e} relative",
        r.captured_ms_per_step,
        double(r.batch * r.length) / (r.captured_ms_per_step / 1e3),
        r.ms_per_step / r.captured_ms_per_step,
        r.captured_loss_diff,
        r.captured_norm_diff);
  return out;
}

std::string train_csv_header() {
  return "dataset,attention,L,batch,layers,width,heads,parameters,device,precision,threads,steps,"
         "ms_per_step,"
         "tokens_per_s,gflop_per_step,dense_gflop,attention_gflop,matmul_gflops,mfu,peak_mib";
}

std::string train_csv_row(const TrainBenchResult& r) {
  char numbers[256];
  std::snprintf(numbers,
                sizeof numbers,
                "%.3f,%.1f,%.6f,%.6f,%.6f,%.2f,%.5f,%.1f",
                r.ms_per_step,
                r.tokens_per_s,
                r.flops.total() / 1e9,
                r.flops.dense / 1e9,
                r.flops.attention / 1e9,
                r.matmul_gflops,
                r.mfu,
                r.peak_mib);
  return r.dataset + "," + r.attention + "," + std::to_string(r.length) + "," +
         std::to_string(r.batch) + "," + std::to_string(r.layers) + "," + std::to_string(r.width) +
         "," + std::to_string(r.heads) + "," + std::to_string(r.parameters) + "," + r.device + "," +
         r.precision + "," + std::to_string(r.threads) + "," + std::to_string(r.steps) + "," +
         numbers;
}

}  // namespace combiner::train
