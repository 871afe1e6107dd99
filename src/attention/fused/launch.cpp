#include "attention/fused/launch.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>

#include "attention/fused/fused.h"

#ifdef COMBINER_WITH_CUDA_KERNELS
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace combiner::attention {

namespace fused_launch {

struct LaunchTimes::Record {
  std::string what;
  int64_t kernels = 0;
  fused::Traffic bytes;
  double cpu_ms = 0;
#ifdef COMBINER_WITH_CUDA_KERNELS
  std::optional<at::cuda::CUDAEvent> start, end;
#endif
};

namespace {

std::atomic<int64_t> launched{0};  // kernels launched (CUDA) or modelled (CPU)
thread_local LaunchTimes* active = nullptr;

// What a call runs, in words: its pass's segments and mask, or its pool's lines.
std::string mask_name(fused::Mask m) {
  return m == fused::Mask::kNone     ? "unmasked"
         : m == fused::Mask::kCausal ? "causal"
         : m == fused::Mask::kStrict ? "strict"
                                     : "others";
}
// (No fmt here: the Python package builds this library without it.)
std::string n(int64_t v) {
  return std::to_string(v);
}
std::string shape(const fused::Pass& p) {
  std::string out = "queries " + n(p.query.segments) + " x " + n(p.query.seg_len) + ", keys " +
                    n(p.key.segments) + " x " + n(p.key.seg_len) + ", " + mask_name(p.mask);
  if (p.summaries && p.by_segment)
    out += ", + summaries " + n(p.summary_key.segments) + " x " + n(p.summary_key.seg_len) + ", " +
           mask_name(p.summary_mask);
  else if (p.summaries)
    out += ", + " + n(p.summary_count) + " summaries";
  if (p.pooled) out += ", running max pools in its tiles";
  return out;
}
std::string describe(const fused::Forward& f) {
  return (f.merge ? "forward (merged): " : "forward: ") + shape(f.pass) +
         (f.query_pool.segments > 0 ? ", its queries the segment max of q's rows" : "") +
         (f.key_pool.segments > 0 ? ", its keys' segment max" : "") +
         (f.delta.delta ? ", and o's delta" : "");
}
std::string describe(const fused::ForwardPair& f) {
  return "forward (two passes): " + shape(f.first.pass) + "; then " + shape(f.second.pass) +
         (f.second.key_pool.segments > 0 ? ", its keys' segment max" : "");
}
std::string describe(const fused::Delta& d) {
  return "delta: " + n(d.rows) + " rows";
}
std::string describe(const fused::Backward& b) {
  const bool one = fused::interleaved_backward(b), by_prefix = fused::prefix_summaries(b.pass);
  return (fused::segment_backward(b.pass) ? "backward (one CTA per segment): "
          : one && by_prefix              ? "backward (dk dv and dq in one launch, d summaries): "
          : one                           ? "backward (dk dv and dq in one launch): "
          : by_prefix                     ? "backward (dk dv, d summaries, dq): "
                                          : "backward (dk dv, dq): ") +
         shape(b.pass) + (b.pools_dq.kind != fused::GradOut::kNone ? ", and their backward" : "") +
         (b.key_pool.segments > 0 ? ", and its keys' segment max backward" : "") +
         (b.query_pool.segments > 0 ? ", and its queries' segment max backward" : "") +
         (b.summary_delta ? ", and u's delta" : "") + (b.made_delta ? ", making delta" : "");
}
std::string describe(const fused::BackwardPair& b) {
  return std::string(fused::segment_backward(b.first.pass)
                         ? "backward (two passes, one CTA per segment): "
                         : "backward (two passes, dk dv, dq): ") +
         shape(b.first.pass) + "; then " + shape(b.second.pass) +
         (b.second.pools_dq.kind != fused::GradOut::kNone ? ", and their backward" : "") +
         (b.second.key_pool.segments > 0 ? ", and its keys' segment max backward" : "");
}

// A pass's key pool (fused::Forward::key_pool, Backward::key_pool), where it has one, fits it.
void check_key_pool(const fused::Pass& p, const fused::SegmentMax& m, bool backward) {
  TORCH_CHECK(m.segments == 0 || fused::key_pool_fits(p, m, backward),
              "fused attention: a key pool its pass's CTAs cannot make (fused/kernel_plan.h "
              "key_pool_fits)");
}
// A pooled pass (fused::Pass::pooled) is one its kernels can pool in (fused::pools_on_chip), and
// the pools' backward in its epilogue one CTA per segment (pools_backward_on_chip).
void check_pooled(const fused::Pass& p, const fused::GradOut& pools_dq = {}) {
  TORCH_CHECK(!p.pooled || fused::pools_on_chip(p),
              "fused attention: a pooled pass its kernels cannot pool (fused/kernel_plan.h "
              "pools_on_chip)");
  TORCH_CHECK(pools_dq.kind == fused::GradOut::kNone || fused::pools_backward_on_chip(p),
              "fused attention: a pools' backward its pass's CTAs cannot run (fused/kernel_plan.h "
              "pools_backward_on_chip)");
}
std::string part(const fused::RunningMax& r) {
  return n(fused::running_max_lines(r)) + " lines of " + n(r.n) + (r.reverse ? ", reversed" : "");
}
std::string part(const fused::SegmentMax& m) {
  return n(m.segments) + " x " + n(m.len) + " rows";
}
// The parts of one launch, joined by " + ".
template <typename Scan>
std::string parts(const fused::ScanParts<Scan>& s) {
  std::string out;
  for (int i = 0; i < s.count; ++i) out += (i > 0 ? " + " : "") + part(s.part[i]);
  return out;
}
std::string describe(const fused::RunningMaxes& r) {
  return std::string(r.part[0].dy ? "running max backward: " : "running max: ") + parts(r);
}
std::string describe(const fused::SegmentMaxes& m) {
  return std::string(m.part[0].dy ? "segment max backward: " : "segment max: ") + parts(m);
}
std::string describe(const fused::DecodeSummaries& s) {
  return "span summaries: " + n(s.spans) + " spans of " + n(s.span_len) + " x " + n(s.batch) +
         " x " + n(s.heads) + " heads" +
         (s.cache == fused::Dtype::kBFloat16 ? ", bfloat16 caches" : "");
}
std::string describe(const fused::DecodeStep& s) {
  return "decode step: " + n(s.batch) + " x " + n(s.heads) + " heads, " +
         n(fused::decode_terms(s)) + " terms" + (s.plans > 1 ? " x " + n(s.plans) + " plans" : "") +
         (s.cache == fused::Dtype::kBFloat16 ? ", bfloat16 caches" : "");
}

// The decode kernels' traffic is not counted (traffic.h).
fused::Traffic traffic_of(const fused::DecodeSummaries&) {
  return {};
}
fused::Traffic traffic_of(const fused::DecodeStep&) {
  return {};
}
template <typename Arg>
fused::Traffic traffic_of(const Arg& arg) {
  return fused::traffic(arg);
}

// A CUDA kernel's host function, or nullptr in a build without the kernels (a parameter type
// that takes no part in deducing Arg, so that nullptr is accepted).
template <typename Arg>
struct CudaFn {
  using type = void (*)(const Arg&, void*);
};
#ifdef COMBINER_WITH_CUDA_KERNELS
#define COMBINER_CUDA(fn) (&fused::fn)
#else
#define COMBINER_CUDA(fn) nullptr
#endif

std::atomic<const HostKernels*> host_kernels{nullptr};

template <typename Arg>
void run(const torch::Tensor& on,
         const Arg& arg,
         int64_t launches,
         void (*cpu)(const Arg&),
         typename CudaFn<Arg>::type cuda,
         typename CudaFn<Arg>::type HostKernels::*host) {
  launched += launches;
  std::unique_ptr<LaunchTimes::Record> record;
  if (active) {
    record = std::make_unique<LaunchTimes::Record>();
    record->what = describe(arg);
    record->kernels = launches;
    record->bytes = traffic_of(arg);
  }
  if (!on.is_cuda()) {
    const auto start = std::chrono::steady_clock::now();
    const HostKernels* installed = host_kernels.load();
    if (installed && installed->*host)
      (installed->*host)(arg, nullptr);
    else
      cpu(arg);
    if (record) {
      record->cpu_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      active->add(std::move(record));
    }
    return;
  }
#ifdef COMBINER_WITH_CUDA_KERNELS
  const c10::cuda::CUDAGuard guard(on.device());
  const auto stream = c10::cuda::getCurrentCUDAStream(on.device().index());
  if (record) {
    record->start.emplace(cudaEventDefault);  // timing enabled
    record->end.emplace(cudaEventDefault);
    record->start->record(stream);
  }
  cuda(arg, stream.stream());
  if (record) {
    record->end->record(stream);
    active->add(std::move(record));
  }
#else
  (void)cuda;
  TORCH_CHECK(false, "fused attention: this build has no CUDA kernels (", on.device(), ")");
#endif
}

}  // namespace

void forward(const torch::Tensor& on, const fused::Forward& f) {
  check_key_pool(f.pass, f.key_pool, false);
  check_pooled(f.pass);
  TORCH_CHECK(f.query_pool.segments == 0 || fused::query_pool_fits(f.pass, f.query_pool),
              "fused attention: a query pool its pass's CTAs cannot make (fused/kernel_plan.h "
              "query_pool_fits)");
  run(on, f, 1, &fused::forward_cpu, COMBINER_CUDA(forward_cuda), &HostKernels::forward);
}
void forward_pair(const torch::Tensor& on, const fused::ForwardPair& f) {
  TORCH_CHECK(fused::pairable(f.first, f.second),
              "fused forward: two passes that do not pair in one launch");
  check_key_pool(f.second.pass, f.second.key_pool, false);
  check_pooled(f.first.pass);
  check_pooled(f.second.pass);
  run(on,
      f,
      1,
      &fused::forward_pair_cpu,
      COMBINER_CUDA(forward_pair_cuda),
      &HostKernels::forward_pair);
}
void delta(const torch::Tensor& on, const fused::Delta& d) {
  run(on, d, 1, &fused::delta_cpu, COMBINER_CUDA(delta_cuda), &HostKernels::delta);
}
void backward(const torch::Tensor& on, const fused::Backward& b) {
  check_key_pool(b.pass, b.key_pool, true);
  TORCH_CHECK(b.query_pool.segments == 0 || fused::query_pool_backward_fits(b),
              "fused attention: a query pool its pass's CTAs cannot take back (fused/kernel_plan.h "
              "query_pool_backward_fits)");
  check_pooled(b.pass, b.pools_dq);
  run(on,
      b,
      fused::backward_launches(b),
      &fused::backward_cpu,
      COMBINER_CUDA(backward_cuda),
      &HostKernels::backward);
}
void backward_pair(const torch::Tensor& on, const fused::BackwardPair& b) {
  TORCH_CHECK(fused::pairable(b.first, b.second),
              "fused backward: two passes that do not pair in one launch");
  check_key_pool(b.second.pass, b.second.key_pool, true);
  check_pooled(b.first.pass, b.first.pools_dq);
  check_pooled(b.second.pass, b.second.pools_dq);
  run(on,
      b,
      fused::backward_launches(b),
      &fused::backward_pair_cpu,
      COMBINER_CUDA(backward_pair_cuda),
      &HostKernels::backward_pair);
}
void running_max(const torch::Tensor& on, const fused::RunningMaxes& r) {
  run(on,
      r,
      1,
      &fused::running_max_forward_cpu,
      COMBINER_CUDA(running_max_forward_cuda),
      &HostKernels::running_max_forward);
}
void running_max_backward(const torch::Tensor& on, const fused::RunningMaxes& r) {
  run(on,
      r,
      1,
      &fused::running_max_backward_cpu,
      COMBINER_CUDA(running_max_backward_cuda),
      &HostKernels::running_max_backward);
}
void segment_max(const torch::Tensor& on, const fused::SegmentMaxes& m) {
  run(on,
      m,
      1,
      &fused::segment_max_forward_cpu,
      COMBINER_CUDA(segment_max_forward_cuda),
      &HostKernels::segment_max_forward);
}
void segment_max_backward(const torch::Tensor& on, const fused::SegmentMaxes& m) {
  run(on,
      m,
      1,
      &fused::segment_max_backward_cpu,
      COMBINER_CUDA(segment_max_backward_cuda),
      &HostKernels::segment_max_backward);
}
void decode_step(const torch::Tensor& on, const fused::DecodeStep& s) {
  run(on,
      s,
      1,
      &fused::decode_step_cpu,
      COMBINER_CUDA(decode_step_cuda),
      &HostKernels::decode_step);
}

void decode_summaries(const torch::Tensor& on, const fused::DecodeSummaries& s) {
  run(on,
      s,
      1,
      &fused::decode_summaries_cpu,
      COMBINER_CUDA(decode_summaries_cuda),
      &HostKernels::decode_summaries);
}

#undef COMBINER_CUDA

const HostKernels* set_host_kernels(const HostKernels* kernels) {
  return host_kernels.exchange(kernels);
}

LaunchTimes::LaunchTimes() : outer_(active) {
  active = this;
}
LaunchTimes::~LaunchTimes() {
  active = outer_;
}
void LaunchTimes::add(std::unique_ptr<Record> record) {
  records_.push_back(std::move(record));
}
std::vector<LaunchTime> LaunchTimes::times() {
  std::vector<LaunchTime> out;
  for (const auto& r : records_) {
    double ms = r->cpu_ms;
#ifdef COMBINER_WITH_CUDA_KERNELS
    if (r->start) {
      r->end->synchronize();
      ms = r->start->elapsed_time(*r->end);
    }
#endif
    out.push_back({r->what, r->kernels, ms, r->bytes});
  }
  return out;
}

}  // namespace fused_launch

int64_t fused_kernel_launches() {
  return fused_launch::launched.load();
}

}  // namespace combiner::attention
