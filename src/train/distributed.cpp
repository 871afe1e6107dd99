// c10d behind a small class. The group is rank 0's TCPStore at MASTER_ADDR:MASTER_PORT plus one
// backend: Gloo for CPU tensors (its header compiles only with USE_C10D_GLOO, and needs gloo's
// headers, libgloo-dev on Debian), NCCL for CUDA tensors when CMake found a CUDA LibTorch and
// nccl.h and defined USE_C10D_NCCL. Collectives run on flattened buckets: one all-reduce per few
// MB of gradients instead of one per tensor.
#include "train/distributed.h"

#include <spdlog/spdlog.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if __has_include(<gloo/config.h>)
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define COMBINER_HAVE_GLOO 1
#endif

#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace combiner::train {

namespace {

#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;  // from 2.0 Gloo and NCCL are backends of a ProcessGroup
#else
using Backend = c10d::ProcessGroup;
#endif

std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  return text.substr(0, text.find('\n'));
}

int64_t parse_count(const std::map<std::string, std::string>& vars,
                    const std::string& name,
                    int64_t fallback) {
  const auto it = vars.find(name);
  if (it == vars.end()) return fallback;
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || value < 0)
    throw std::invalid_argument("environment: " + name + "=" + it->second +
                                " is not a non-negative integer");
  return value;
}

std::string required(const std::map<std::string, std::string>& vars, const std::string& name) {
  const auto it = vars.find(name);
  if (it == vars.end() || it->second.empty())
    throw std::invalid_argument("environment: WORLD_SIZE > 1 needs " + name +
                                " (set by torchrun or scripts/launch.sh)");
  return it->second;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace

LaunchEnvironment parse_launch_environment(const std::map<std::string, std::string>& vars) {
  LaunchEnvironment env;
  if (!vars.count("RANK") && !vars.count("WORLD_SIZE")) return env;
  if (!vars.count("RANK") || !vars.count("WORLD_SIZE"))
    throw std::invalid_argument("environment: RANK and WORLD_SIZE go together; only " +
                                std::string(vars.count("RANK") ? "RANK" : "WORLD_SIZE") +
                                " is set");
  env.world_size = parse_count(vars, "WORLD_SIZE", 1);
  env.rank = parse_count(vars, "RANK", 0);
  if (env.world_size < 1)
    throw std::invalid_argument("environment: WORLD_SIZE must be at least 1, got 0");
  if (env.rank >= env.world_size)
    throw std::invalid_argument("environment: RANK=" + std::to_string(env.rank) +
                                " is outside [0, WORLD_SIZE=" + std::to_string(env.world_size) +
                                ")");
  env.local_rank = parse_count(vars, "LOCAL_RANK", env.rank);
  env.local_world_size = parse_count(vars, "LOCAL_WORLD_SIZE", env.world_size);
  if (env.local_world_size < 1 || env.local_rank >= env.local_world_size)
    throw std::invalid_argument(
        "environment: LOCAL_RANK=" + std::to_string(env.local_rank) +
        " is outside [0, LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size) + ")");
  if (!env.distributed()) return env;
  env.master_addr = required(vars, "MASTER_ADDR");
  env.master_port = parse_count(vars, "MASTER_PORT", -1);
  if (env.master_port < 0) required(vars, "MASTER_PORT");
  if (env.master_port < 1 || env.master_port > 65535)
    throw std::invalid_argument("environment: MASTER_PORT=" + std::to_string(env.master_port) +
                                " is not a port (1-65535)");
  const auto agent = vars.find("TORCHELASTIC_USE_AGENT_STORE");
  env.agent_store = agent != vars.end() && agent->second == "True";
  if (env.agent_store) {
    const auto restart = vars.find("TORCHELASTIC_RESTART_COUNT");
    env.store_prefix = "/worker/attempt_" + (restart == vars.end() ? "0" : restart->second);
  }
  return env;
}

LaunchEnvironment read_launch_environment() {
  std::map<std::string, std::string> vars;
  for (const char* name : {"RANK",
                           "WORLD_SIZE",
                           "LOCAL_RANK",
                           "LOCAL_WORLD_SIZE",
                           "MASTER_ADDR",
                           "MASTER_PORT",
                           "TORCHELASTIC_USE_AGENT_STORE",
                           "TORCHELASTIC_RESTART_COUNT"})
    if (const char* value = std::getenv(name)) vars[name] = value;
  return parse_launch_environment(vars);
}

torch::Device resolve_device(const std::string& name, const LaunchEnvironment& launch) {
  const bool have_cuda = torch::cuda::is_available();
  if (name == "cpu" || (name == "auto" && !have_cuda)) return torch::Device(torch::kCPU);
  if (!have_cuda)
    throw std::invalid_argument("train.device: " + name +
                                " asked for, but LibTorch sees no CUDA device (a CPU-only build "
                                "or no GPU); use train.device=cpu or auto");
  const int64_t count = static_cast<int64_t>(torch::cuda::device_count());
  const int64_t index = name.rfind("cuda:", 0) == 0 ? std::stoll(name.substr(5))
                        : launch.distributed()      ? launch.local_rank
                                                    : 0;
  if (index >= count)
    throw std::invalid_argument("train.device: " + name + " means cuda:" + std::to_string(index) +
                                " (LOCAL_RANK " + std::to_string(launch.local_rank) + "), but " +
                                std::to_string(count) + " CUDA devices are visible");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int64_t threads_for(int64_t threads, const LaunchEnvironment& launch) {
  if (threads > 0) return threads;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return std::max<int64_t>(1, cores / launch.local_world_size);
}

std::pair<int64_t, int64_t> shard_range(int64_t count, int64_t rank, int64_t world_size) {
  return {count * rank / world_size, count * (rank + 1) / world_size};
}

// ------------------------------------------------------------------------------------------------

struct Distributed::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> backend;
  torch::Device device{torch::kCPU};  // where collective buffers live: the backend's device
};

namespace {

c10::intrusive_ptr<Backend> make_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                         const LaunchEnvironment& launch,
                                         const torch::Device& device,
                                         std::chrono::milliseconds timeout) {
  const int rank = static_cast<int>(launch.rank), size = static_cast<int>(launch.world_size);
  if (device.is_cuda()) {
#ifdef USE_C10D_NCCL
    c10::cuda::set_device(device.index());
    // wait() then blocks on the CPU and throws after the timeout instead of leaving a hung
    // stream (NCCL_* for LibTorch 1.x, TORCH_NCCL_* from 2.2); a user's setting wins.
    setenv("NCCL_BLOCKING_WAIT", "1", 0);
    setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
    throw std::invalid_argument(
        "train.device: a multi-process CUDA run needs c10d's NCCL backend, and this build has "
        "none (CMake found no CUDA LibTorch with nccl.h); use train.device=cpu for Gloo");
#endif
  }
#ifdef COMBINER_HAVE_GLOO
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (is_loopback(launch.master_addr))
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(launch.master_addr));
  else
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#else
  throw std::runtime_error(
      "multi-process CPU training needs c10d's Gloo backend, and this build has none (gloo's "
      "headers were not found: install libgloo-dev)");
#endif
}

// The tensors in groups of one dtype and at most `bytes` (a larger tensor is a group alone).
std::vector<std::vector<torch::Tensor>> buckets_of(const std::vector<torch::Tensor>& tensors,
                                                   int64_t bytes) {
  std::vector<std::vector<torch::Tensor>> out;
  int64_t filled = 0;
  for (const auto& t : tensors) {
    const int64_t size = t.numel() * static_cast<int64_t>(t.element_size());
    if (out.empty() || out.back().front().scalar_type() != t.scalar_type() ||
        filled + size > bytes) {
      out.emplace_back();
      filled = 0;
    }
    out.back().push_back(t);
    filled += size;
  }
  return out;
}

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const torch::Device& device) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().reshape({-1}));
  return torch::cat(flat).to(device);
}

void unflatten_into(const torch::Tensor& flat, std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  int64_t at = 0;
  for (auto& t : tensors) {
    t.copy_(flat.slice(0, at, at + t.numel()).view_as(t));
    at += t.numel();
  }
}

}  // namespace

Distributed::Distributed(const LaunchEnvironment& launch,
                         const torch::Device& device,
                         const DistributedOptions& options)
    : launch_(launch), options_(options) {
  if (!launch.distributed()) return;
  const std::string where = launch.master_addr + ":" + std::to_string(launch.master_port);
  const int64_t timeout_s = options.timeout.count() / 1000;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(launch.master_port);
    store_options.isServer = !launch.agent_store && launch.rank == 0;
    store_options.numWorkers = static_cast<size_t>(launch.world_size);
    store_options.waitWorkers = !launch.agent_store;
    store_options.timeout = options.timeout;
    auto group = std::make_unique<Group>();
    group->store = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, store_options);
    if (launch.agent_store)
      group->store = c10::make_intrusive<c10d::PrefixStore>(launch.store_prefix, group->store);
    group->backend = make_backend(group->store, launch, device, options.timeout);
    group->device = device;
    group_ = std::move(group);
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(
        "rank " + std::to_string(launch.rank) + " of " + std::to_string(launch.world_size) +
        ": could not form the process group at " + where +
        " within train.dist_timeout_s = " + std::to_string(timeout_s) +
        " s (did every rank start, with the same MASTER_ADDR/PORT?): " + first_line(e));
  }
}

Distributed::Distributed() = default;
Distributed::~Distributed() = default;
Distributed::Distributed(Distributed&&) noexcept = default;
Distributed& Distributed::operator=(Distributed&&) noexcept = default;

namespace {

// Runs one collective; a failure (a rank died, or the timeout passed) becomes one line.
template <typename Body>
void collective(const LaunchEnvironment& launch,
                std::chrono::milliseconds timeout,
                const char* what,
                Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(launch.rank) + " of " +
                             std::to_string(launch.world_size) + ": " + what +
                             " failed: another rank exited or did not answer within "
                             "train.dist_timeout_s = " +
                             std::to_string(timeout.count() / 1000) + " s (" + first_line(e) + ")");
  }
}

}  // namespace

std::string Distributed::backend() const {
  return group_ ? group_->backend->getBackendName() : "none";
}

void Distributed::broadcast_parameters(torch::nn::Module& module) const {
  if (!group_) return;
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const auto& b : module.buffers()) tensors.push_back(b);
  collective(launch_, options_.timeout, "broadcast of the parameters", [&] {
    for (auto& bucket : buckets_of(tensors, options_.bucket_bytes)) {
      std::vector<torch::Tensor> flat{flatten(bucket, group_->device)};
      group_->backend->broadcast(flat, c10d::BroadcastOptions{})->wait();
      unflatten_into(flat[0], bucket);
    }
  });
}

void Distributed::all_reduce_gradients(torch::nn::Module& module) const {
  if (!group_) return;
  std::vector<torch::Tensor> grads;
  for (auto& p : module.parameters()) {
    if (!p.requires_grad()) continue;
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  collective(launch_, options_.timeout, "all-reduce of the gradients", [&] {
    // Every bucket's all-reduce is in flight before the first wait.
    auto buckets = buckets_of(grads, options_.bucket_bytes);
    std::vector<std::vector<torch::Tensor>> flats;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& bucket : buckets) {
      flats.push_back({flatten(bucket, group_->device)});
      works.push_back(group_->backend->allreduce(flats.back(), c10d::AllreduceOptions{}));
    }
    for (size_t i = 0; i < buckets.size(); ++i) {
      works[i]->wait();
      unflatten_into(flats[i][0].div_(double(launch_.world_size)), buckets[i]);
    }
  });
}

void Distributed::all_reduce_sum(torch::Tensor& tensor) const {
  if (!group_) return;
  collective(launch_, options_.timeout, "all-reduce", [&] {
    std::vector<torch::Tensor> buffer{tensor.to(group_->device).contiguous()};
    group_->backend->allreduce(buffer, c10d::AllreduceOptions{})->wait();
    if (!buffer[0].is_same(tensor)) {
      torch::NoGradGuard no_grad;
      tensor.copy_(buffer[0]);
    }
  });
}

int64_t Distributed::max_over_ranks(int64_t value) const {
  if (!group_) return value;
  int64_t result = value;
  collective(launch_, options_.timeout, "all-reduce", [&] {
    std::vector<torch::Tensor> buffer{torch::tensor({value}, torch::kLong).to(group_->device)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::MAX;
    group_->backend->allreduce(buffer, options)->wait();
    result = buffer[0].item<int64_t>();
  });
  return result;
}

void Distributed::barrier() const {
  if (!group_) return;
  // An all-reduce of one number: c10d's NCCL barrier guesses each rank's GPU from its rank.
  auto token = torch::zeros({1});
  collective(launch_, options_.timeout, "barrier", [&] {
    std::vector<torch::Tensor> buffer{token.to(group_->device)};
    group_->backend->allreduce(buffer, c10d::AllreduceOptions{})->wait();
  });
}

void Distributed::run_on_main(const std::function<void()>& work) const {
  if (!group_) return work();
  const std::string key = "combiner/main_done/" + std::to_string(main_runs_++);
  if (is_main()) {
    work();
    group_->store->set(key, std::vector<uint8_t>{1});
    return;
  }
  try {
    // A year, not Store::kNoTimeout: TCPStore ignores 0 and keeps the last timeout it was given.
    group_->store->wait({key}, std::chrono::hours(24 * 365));
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(rank()) + " of " +
                             std::to_string(world_size()) +
                             ": rank 0 exited while this rank waited for its work alone (sample "
                             "grid or checkpoint) (" +
                             first_line(e) + ")");
  }
}

}  // namespace combiner::train
