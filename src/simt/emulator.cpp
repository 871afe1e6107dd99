// The SIMT emulator's scheduler (emulator.h): a block's threads as fibers on one CPU thread.
#include "simt/emulator.h"

#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "simt/context.h"

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;

namespace combiner::simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // a fiber's stack: the kernels' locals and a margin
// Past a block's dynamic shared memory: bytes of this value that no kernel may write.
constexpr size_t kSharedGuardBytes = 4096;
constexpr unsigned char kSharedGuard = 0xa5;

enum class State { kRunnable, kBlockBarrier, kWarpCollective, kDone };

struct Fiber {
  Context context;
  State state = State::kRunnable;
  uint3 thread{};
  const char* barrier_file = nullptr;  // the __syncthreads it waits at
  int barrier_line = 0;
  int predicate = 0;            // __syncthreads_or's: in, then the block's OR
  detail::WarpOp op = nullptr;  // the collective it waits at, and its data
  void* data = nullptr;
  unsigned mask = 0;
  struct Copy {
    void* dst;
    const void* src;  // nullptr: zeros
    size_t bytes;
  };
  std::vector<std::vector<Copy>> copies;  // cp.async groups in flight, oldest first; the last
  bool group_open = false;                // is the open (uncommitted) one when group_open
};

struct Block {
  Context scheduler;
  std::vector<Fiber> fibers;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<unsigned char> shared;
  std::exception_ptr error;
};

thread_local Block* g_block = nullptr;
thread_local Schedule g_schedule = Schedule::kForward;
thread_local cudaError_t g_last_error = cudaSuccess;
thread_local int64_t g_launches = 0;
thread_local int64_t g_async_bytes = 0;  // cp.async bytes from memory
thread_local std::vector<std::unique_ptr<unsigned char[]>> g_stacks;  // reused across launches
thread_local std::map<const void*, int> g_shared_limit;               // raised per kernel

std::string where(const Fiber& f) {
  return "block (" + std::to_string(blockIdx.x) + ", " + std::to_string(blockIdx.y) + ", " +
         std::to_string(blockIdx.z) + ") thread (" + std::to_string(f.thread.x) + ", " +
         std::to_string(f.thread.y) + ", " + std::to_string(f.thread.z) + ")";
}

Block& block() {
  if (!g_block) throw std::logic_error("simt emulator: a device function called outside a kernel");
  return *g_block;
}

// Back to the scheduler until the barrier this fiber now waits at is passed.
void wait() {
  Block& b = block();
  Fiber& f = *b.current;
  jump(f.context, b.scheduler);
  threadIdx = f.thread;
}

void fiber_main() {
  Block& b = *g_block;
  Fiber& f = *b.current;
  try {
    (*b.body)();
  } catch (...) {
    if (!b.error) b.error = std::current_exception();
  }
  if (!f.copies.empty() && !b.error)
    b.error = std::make_exception_ptr(std::runtime_error(
        "simt emulator: " + where(f) + " returned with cp.async copies in flight (no wait)"));
  f.state = State::kDone;
  jump(f.context, b.scheduler);  // never resumed
}

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("simt emulator: " + what);
}

// Passes every barrier whose threads have all arrived; false where none could be passed.
bool pass_barriers(Block& b) {
  bool passed = false, warp_pending = false;
  const size_t n = b.fibers.size();
  for (size_t w0 = 0; w0 < n; w0 += 32) {
    const size_t w1 = std::min(n, w0 + 32);
    const Fiber* waiting = nullptr;
    for (size_t i = w0; i < w1; ++i)
      if (b.fibers[i].state == State::kWarpCollective) waiting = &b.fibers[i];
    if (!waiting) continue;
    void* lanes[32] = {};
    for (size_t i = w0; i < w1; ++i) {
      const Fiber& f = b.fibers[i];
      if (f.state != State::kWarpCollective)
        fail(where(*waiting) + " waits at a warp collective that " + where(f) +
             (f.state == State::kDone ? " has returned before" : " waits elsewhere for"));
      if (f.op != waiting->op || f.mask != waiting->mask)
        fail(where(*waiting) + " and " + where(f) + " wait at different warp collectives");
      lanes[i - w0] = f.data;
    }
    waiting->op(lanes);
    for (size_t i = w0; i < w1; ++i) b.fibers[i].state = State::kRunnable;
    passed = warp_pending = true;
  }
  if (warp_pending) return passed;
  const Fiber* first = nullptr;
  int any = 0;
  for (const Fiber& f : b.fibers) {
    if (f.state == State::kDone) continue;
    if (!first) first = &f;
    if (f.barrier_line != first->barrier_line ||
        std::strcmp(f.barrier_file, first->barrier_file) != 0)
      fail(where(*first) + " waits at the __syncthreads of " + first->barrier_file + ":" +
           std::to_string(first->barrier_line) + ", " + where(f) + " at " + f.barrier_file + ":" +
           std::to_string(f.barrier_line));
    any |= f.predicate;
  }
  if (!first) return false;
  for (Fiber& f : b.fibers) {
    if (f.state == State::kDone) continue;
    f.state = State::kRunnable;
    f.predicate = any;
  }
  return true;
}

void run_block(Block& b, dim3 block_dim) {
  const size_t n = size_t(block_dim.x) * block_dim.y * block_dim.z;
  while (g_stacks.size() < n) g_stacks.emplace_back(new unsigned char[kStackBytes]);
  b.fibers.assign(n, Fiber{});
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.thread = {unsigned(i % block_dim.x),
                unsigned(i / block_dim.x % block_dim.y),
                unsigned(i / (size_t(block_dim.x) * block_dim.y))};
    start(f.context, g_stacks[i].get(), kStackBytes, fiber_main);
  }
  size_t done = 0;
  while (done < n) {
    for (size_t k = 0; k < n; ++k) {
      Fiber& f = b.fibers[g_schedule == Schedule::kForward ? k : n - 1 - k];
      if (f.state != State::kRunnable) continue;
      b.current = &f;
      threadIdx = f.thread;
      jump(b.scheduler, f.context);
      if (b.error) std::rethrow_exception(b.error);
    }
    done = 0;
    for (const Fiber& f : b.fibers) done += f.state == State::kDone;
    if (done < n && !pass_barriers(b)) fail("no thread can go on");  // unreachable by design
  }
}

}  // namespace

ScheduleScope::ScheduleScope(Schedule schedule) : previous_(g_schedule) {
  g_schedule = schedule;
}
ScheduleScope::~ScheduleScope() {
  g_schedule = previous_;
}

int64_t launches() {
  return g_launches;
}
int64_t async_copied_bytes() {
  return g_async_bytes;
}

namespace detail {

void set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize) g_shared_limit[kernel] = value;
}

void run_grid(const void* kernel,
              dim3 grid,
              dim3 block_dim,
              size_t shared_bytes,
              const std::function<void()>& body) {
  const size_t threads = size_t(block_dim.x) * block_dim.y * block_dim.z;
  const auto raised = g_shared_limit.find(kernel);
  const size_t limit =
      raised == g_shared_limit.end() ? kDefaultSharedLimit : size_t(raised->second);
  if (threads == 0 || threads > kMaxThreadsPerBlock || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    g_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  if (shared_bytes > limit || shared_bytes > kMaxSharedPerBlock) {
    g_last_error = cudaErrorInvalidValue;
    return;
  }
  if (g_block) throw std::logic_error("simt emulator: a launch from inside a kernel");
  ++g_launches;
  Block b;
  b.body = &body;
  g_block = &b;
  gridDim = grid;
  blockDim = block_dim;
  try {
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = {x, y, z};
          b.shared.assign(shared_bytes + kSharedGuardBytes, kSharedGuard);
          std::memset(b.shared.data(), 0xff, shared_bytes);
          b.error = nullptr;
          run_block(b, block_dim);
          for (size_t i = shared_bytes; i < b.shared.size(); ++i)
            if (b.shared[i] != kSharedGuard)
              fail("block (" + std::to_string(x) + ", " + std::to_string(y) + ", " +
                   std::to_string(z) + ") wrote past its " + std::to_string(shared_bytes) +
                   " bytes of dynamic shared memory (byte " + std::to_string(i) + ")");
        }
  } catch (...) {
    g_block = nullptr;
    throw;
  }
  g_block = nullptr;
}

void* dynamic_shared() {
  return block().shared.data();
}

void warp_collective(unsigned mask, WarpOp op, void* mine) {
  Block& b = block();
  Fiber& f = *b.current;
  if (mask != 0xffffffffu) fail(where(f) + ": a warp collective over part of a warp");
  f.state = State::kWarpCollective;
  f.op = op;
  f.mask = mask;
  f.data = mine;
  wait();
}

}  // namespace detail

void cp_async(void* dst, const void* src, size_t bytes) {
  Fiber& f = *block().current;
  if (!f.group_open) {
    f.copies.emplace_back();
    f.group_open = true;
  }
  f.copies.back().push_back({dst, src, bytes});
  if (src) g_async_bytes += int64_t(bytes);
}

void cp_async_commit() {
  Fiber& f = *block().current;
  if (!f.group_open) f.copies.emplace_back();  // an empty group, as PTX allows
  f.group_open = false;
}

void cp_async_wait(int newest_pending) {
  Fiber& f = *block().current;
  const size_t committed = f.copies.size() - (f.group_open ? 1 : 0);
  const size_t land = committed > size_t(newest_pending) ? committed - newest_pending : 0;
  for (size_t g = 0; g < land; ++g)
    for (const auto& c : f.copies[g]) {
      if (c.src)
        std::memcpy(c.dst, c.src, c.bytes);
      else
        std::memset(c.dst, 0, c.bytes);
    }
  f.copies.erase(f.copies.begin(), f.copies.begin() + ptrdiff_t(land));
}

}  // namespace combiner::simt

// ---- the device functions of the global namespace ----

namespace combiner::simt::detail {
int block_barrier(int predicate, const char* file, int line) {
  Block& b = block();
  Fiber& f = *b.current;
  f.state = State::kBlockBarrier;
  f.barrier_file = file;
  f.barrier_line = line;
  f.predicate = predicate;
  wait();
  return f.predicate;
}
}  // namespace combiner::simt::detail

cudaError_t cudaGetLastError() {
  const cudaError_t e = combiner::simt::g_last_error;
  combiner::simt::g_last_error = cudaSuccess;
  return e;
}
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
  }
  return "unknown error";
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
