// A CUDA grid run on one CPU thread, so that the project's kernels' own source (not only their
// CPU models) runs in the tests of a machine without a GPU. Each block's threads are fibers
// (ucontext), run in turn, each until it reaches a barrier (__syncthreads, or a warp's collective:
// a shuffle, a vote, __syncwarp, ldmatrix, mma) or returns; a barrier is passed when every live
// thread of its block (or lane of its warp) has reached it. Blocks run one after another. Global
// memory is host memory; dynamic shared memory is a buffer per block, filled with 0xff bytes (NaN
// as float) so a read of what no thread wrote shows in the output.
//
// What it checks that the CPU models cannot: the kernel's indexing and shared-memory layout as
// written, and its synchronisation, as errors naming the kernel's block and thread:
//   - threads of a block waiting at different __syncthreads, or a lane waiting at a warp's
//     collective while another lane of it has returned or waits at something else;
//   - a launch of over 1,024 threads, or with more dynamic shared memory than the device has
//     (227 KB), or over 48 KB without the kernel's limit raised (cudaFuncSetAttribute), as
//     cudaGetLastError() reports it on a GPU;
//   - a block that wrote within 4 KB past its dynamic shared memory (a guard zone checked when
//     the block ends: a layout bigger than the launch asked for).
// A write is seen by every thread at once (but for cp.async's copies, which land when their thread
// waits for them), so a missing barrier does not show by itself; run a kernel under both schedules
// (threads in order, then in reverse, `ScheduleScope`) and compare: output that depends on the
// order is a race. Not modelled: timing, bank conflicts, registers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- CUDA's names, as its headers declare them (the global namespace) ----

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__
// A block's threads share a static array: blocks run one at a time on one CPU thread.
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float x, float y) {
  return {x, y};
}
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;

// bfloat16: the high half of a float32, rounded to nearest even (NaN stays NaN).
struct __nv_bfloat16 {
  uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  if (std::isnan(f)) return {0x7fc0};
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = uint32_t(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16(lo), __float2bfloat16(hi)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 v) {
  return {__bfloat162float(v.x), __bfloat162float(v.y)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) {
  return h.bits;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// CUDA's min and max of two values of one type (int, int64_t, float, ...).
template <typename T>
T min(T a, T b) {
  return b < a ? b : a;
}
template <typename T>
T max(T a, T b) {
  return a < b ? b : a;
}
inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}
// Shared and global memory are one address space here: a shared address is the pointer itself.
inline size_t __cvta_generic_to_shared(const void* p) {
  return reinterpret_cast<size_t>(p);
}

// A barrier is named by its line in the source (the compiler may copy one call to several
// places): threads waiting at different lines are an error.
#define __syncthreads() ::combiner::simt::detail::block_barrier(0, __FILE__, __LINE__)
#define __syncthreads_or(predicate) \
  ::combiner::simt::detail::block_barrier((predicate) != 0, __FILE__, __LINE__)
void __syncwarp(unsigned mask = 0xffffffffu);
int __any_sync(unsigned mask, int predicate);
int __all_sync(unsigned mask, int predicate);
float __shfl_xor_sync(unsigned mask, float value, int lane_mask, int width = 32);
int __shfl_xor_sync(unsigned mask, int value, int lane_mask, int width = 32);
unsigned __shfl_xor_sync(unsigned mask, unsigned value, int lane_mask, int width = 32);
float __shfl_sync(unsigned mask, float value, int src_lane, int width = 32);
int __shfl_sync(unsigned mask, int value, int src_lane, int width = 32);

// One CPU thread runs a block at a time: an update is atomic.
template <typename T>
T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}

// The host API the kernels' launch code calls.
using cudaStream_t = struct CUstream_st*;
enum cudaError_t : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
};
enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetDevice(int* device);

namespace combiner::simt {

// The device the emulator stands for (an H100's or H200's limits).
constexpr size_t kDefaultSharedLimit = 48 * 1024;  // without the kernel's attribute raised
constexpr size_t kMaxSharedPerBlock = 227 * 1024;  // the most an attribute may raise it to
constexpr unsigned kMaxThreadsPerBlock = 1024;

// The order a block's threads run in between barriers (a race shows as a difference).
enum class Schedule { kForward, kReverse };
class ScheduleScope {  // the schedule of every launch on this thread while it lives
 public:
  explicit ScheduleScope(Schedule schedule);
  ~ScheduleScope();
  ScheduleScope(const ScheduleScope&) = delete;
  ScheduleScope& operator=(const ScheduleScope&) = delete;

 private:
  Schedule previous_;
};

// The launches the emulator has run on this thread: tests that a kernel ran at all.
int64_t launches();
// The bytes its cp.async copies have read from memory on this thread (zero fills not counted):
// what the kernels load into their tiles, against attention/fused/traffic.h's count.
int64_t async_copied_bytes();

namespace detail {
void set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value);
// Runs body() as every thread of every block of the grid; sets cudaGetLastError's error instead
// where a GPU would refuse the launch; throws std::runtime_error on a synchronisation error.
void run_grid(const void* kernel,
              dim3 grid,
              dim3 block,
              size_t shared_bytes,
              const std::function<void()>& body);
void* dynamic_shared();
// A warp collective: the calling lane's data, and the function that, once every lane of the
// warp is there, reads and writes all 32 lanes' data (nullptr for a lane past the block).
using WarpOp = void (*)(void* const* lanes);
// __syncthreads_or(predicate) at file:line: the block's OR of the predicates.
int block_barrier(int predicate, const char* file, int line);
void warp_collective(unsigned mask, WarpOp op, void* mine);
}  // namespace detail

template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(detail::dynamic_shared());
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...), as COMBINER_LAUNCH spells it.
template <typename... Params>
class Launch {
 public:
  Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t)
      : kernel_(kernel), grid_(grid), block_(block), shared_bytes_(shared_bytes) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    const std::tuple<std::decay_t<Params>...> copied(std::forward<Args>(args)...);
    detail::run_grid(reinterpret_cast<const void*>(kernel_), grid_, block_, shared_bytes_, [&] {
      std::apply(kernel_, copied);
    });
  }

 private:
  void (*kernel_)(Params...);
  dim3 grid_, block_;
  size_t shared_bytes_;
};

// ---- asynchronous copies (cp.async: kernel_tile.cuh's asm) ----
// A copy lands at the latest moment the hardware allows: when its thread waits for its group
// (cp_async_wait), not when it is issued, so a read before the wait sees the old bytes (0xff at a
// block's start). `bytes` from src into dst, or zeros where src is null. A thread that returns
// with copies in flight is an error.
void cp_async(void* dst, const void* src, size_t bytes);
void cp_async_commit();                  // closes the thread's current group
void cp_async_wait(int newest_pending);  // lands every committed group but the newest N

// ---- the warp-level matrix instructions of the bfloat16 kernels (kernel_tile.cuh's asm) ----

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives the address of row l % 8 of
// matrix l / 8; r[i] of lane l gets two elements of matrix i, (l / 4, 2 (l % 4) + {0, 1}), or
// with .trans (2 (l % 4) + {0, 1}, l / 4).
void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: c += A B for the warp's 16 x 16 A, 16 x 8
// B and 16 x 8 c, each held in the lanes' registers in PTX's fragment layout (g = l / 4,
// q = l % 4): a[0] (g, 2q..), a[1] (g + 8, 2q..), a[2] (g, 2q + 8..), a[3] (g + 8, 2q + 8..);
// b0 (2q.., g), b1 (2q + 8.., g); c (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1).
void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

}  // namespace combiner::simt

template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attribute, int value) {
  combiner::simt::detail::set_function_attribute(
      reinterpret_cast<const void*>(kernel), attribute, value);
  return cudaSuccess;
}
