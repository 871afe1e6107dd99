// Data-parallel training on c10d, PyTorch's own distributed engine: a process group formed from
// the variables torchrun (or scripts/launch.sh) sets, Gloo on CPU and NCCL on CUDA when the
// LibTorch build has it. One process with no variables has no group, and every collective below
// is then a no-op, so the training loop reads the same for 1 or N processes.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace combiner::train {

// Where this process sits in the job: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT. The defaults are one process and no group.
struct LaunchEnvironment {
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;        // picks the GPU of a multi-process CUDA run
  int64_t local_world_size = 1;  // processes on this machine: they share its cores
  std::string master_addr;       // host of rank 0's TCPStore
  int64_t master_port = 0;
  // torchrun's agent already hosts the store at MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True); every rank is then a client, under this prefix.
  bool agent_store = false;
  std::string store_prefix;

  bool distributed() const { return world_size > 1; }
};

// Reads the variables from `vars` (name -> value). No RANK and no WORLD_SIZE = one process.
// Throws std::invalid_argument naming the variable when one is missing, not a number, or out of
// range (RANK=5 with WORLD_SIZE=2).
LaunchEnvironment parse_launch_environment(const std::map<std::string, std::string>& vars);
// The same from this process's environment.
LaunchEnvironment read_launch_environment();

// train.device: auto = cuda when LibTorch sees a GPU, else cpu; "cuda" in a multi-process run
// means cuda:LOCAL_RANK. Throws std::invalid_argument when a GPU is asked for and there is none.
torch::Device resolve_device(const std::string& name, const LaunchEnvironment& launch);

// LibTorch threads for this process: `threads`, or for 0 the machine's cores shared evenly by
// the LOCAL_WORLD_SIZE processes on it (at least one each).
int64_t threads_for(int64_t threads, const LaunchEnvironment& launch);

struct DistributedOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // train.dist_timeout_s
  int64_t bucket_bytes = int64_t{4} << 20;  // gradients flattened into one all-reduce
};

class Distributed {
 public:
  Distributed();  // one process: rank 0 of 1, every collective a no-op
  // Forms the process group (Gloo for CPU tensors, NCCL for CUDA when built with it); blocks
  // until every rank has joined, or throws std::runtime_error after options.timeout.
  Distributed(const LaunchEnvironment& launch,
              const torch::Device& device,
              const DistributedOptions& options = {});
  ~Distributed();
  Distributed(Distributed&&) noexcept;
  Distributed& operator=(Distributed&&) noexcept;

  int64_t rank() const { return launch_.rank; }
  int64_t world_size() const { return launch_.world_size; }
  bool is_main() const { return launch_.rank == 0; }
  const LaunchEnvironment& launch() const { return launch_; }
  std::string backend() const;  // "gloo", "nccl", or "none" for one process

  // Collectives: every rank calls them in the same order. Each throws std::runtime_error, one
  // line, when another rank died or did not answer within options.timeout.

  // Rank 0's parameters and buffers copied into every rank's module.
  void broadcast_parameters(torch::nn::Module& module) const;
  // Every parameter's gradient replaced by its mean over the ranks (a missing gradient counts
  // as zeros), all-reduced in flattened buckets of about options.bucket_bytes.
  void all_reduce_gradients(torch::nn::Module& module) const;
  // In place: the element-wise sum of `tensor` over the ranks.
  void all_reduce_sum(torch::Tensor& tensor) const;
  // The largest of `value` over the ranks (one process: `value`).
  int64_t max_over_ranks(int64_t value) const;
  void barrier() const;
  // Runs `work` on rank 0 alone (sample grids, checkpoints) while the other ranks wait, however
  // long it takes: unlike a collective this wait has no timeout, but it fails at once when rank
  // 0 exits. Every rank calls it at the same points.
  void run_on_main(const std::function<void()>& work) const;

 private:
  struct Group;
  LaunchEnvironment launch_;
  DistributedOptions options_;
  std::unique_ptr<Group> group_;   // null in a one-process run
  mutable int64_t main_runs_ = 0;  // run_on_main calls so far: names the key rank 0 sets
};

// Images [begin, end) of a set of `count` that rank `rank` of `world_size` handles: contiguous
// shards that differ in size by at most one and together cover every image exactly once.
std::pair<int64_t, int64_t> shard_range(int64_t count, int64_t rank, int64_t world_size);

}  // namespace combiner::train
