// The SIMT emulator (src/simt/emulator.h) on small kernels of known result: indices, barriers,
// shuffles and votes, the warp's matrix instructions against plain loops, and the errors it must
// raise (threads at different barriers, a lane missing from a collective, a launch a GPU would
// refuse, a write past the dynamic shared memory, a race that shows as a difference between the
// two schedules).
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "simt/cuda.h"

namespace {

using combiner::simt::Schedule;
using combiner::simt::ScheduleScope;

__global__ void write_indices(int* out) {
  const int i = int(blockIdx.y * gridDim.x + blockIdx.x) * int(blockDim.x * blockDim.y) +
                int(threadIdx.y * blockDim.x + threadIdx.x);
  out[i] = i;
}

TEST(SimtEmulator, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  std::vector<int> out(3 * 2 * 64, -1);
  COMBINER_LAUNCH(dim3(3, 2), dim3(32, 2), 0, nullptr, write_indices)(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int i = 0; i < int(out.size()); ++i) EXPECT_EQ(out[i], i);
}

// The block's sum: each warp by shuffles, then the warps' sums through shared memory.
__global__ void block_sum(const float* x, float* out) {
  COMBINER_DYNAMIC_SHARED(float, sums);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  float v = x[blockIdx.x * blockDim.x + tid];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) sums[warp] = v;
  __syncthreads();
  if (tid == 0) {
    float total = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += sums[w];
    out[blockIdx.x] = total;
  }
}

TEST(SimtEmulator, ShufflesAndABarrierSumABlock) {
  std::vector<float> x(2 * 128), out(2, 0.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 7) - 2.f;
  for (const auto schedule : {Schedule::kForward, Schedule::kReverse}) {
    const ScheduleScope scope(schedule);
    COMBINER_LAUNCH(2, 128, 4 * sizeof(float), nullptr, block_sum)(x.data(), out.data());
    for (int b = 0; b < 2; ++b) {
      float want = 0.f;
      for (int i = 0; i < 128; ++i) want += x[b * 128 + i];
      EXPECT_EQ(out[b], want);
    }
  }
}

__global__ void votes(const int* x, int* any, int* all, int* any_block) {
  const int tid = int(threadIdx.x);
  const int a = __any_sync(0xffffffffu, x[tid]), b = __all_sync(0xffffffffu, x[tid]);
  const int c = __syncthreads_or(x[tid]);
  if (tid % 32 == 0) any[tid / 32] = a, all[tid / 32] = b;
  if (tid == 0) *any_block = c;
}

TEST(SimtEmulator, VotesAndSyncthreadsOr) {
  std::vector<int> x(64, 0), any(2, -1), all(2, -1);
  int any_block = -1;
  x[40] = 1;  // one lane of the second warp
  COMBINER_LAUNCH(1, 64, 0, nullptr, votes)(x.data(), any.data(), all.data(), &any_block);
  EXPECT_EQ(any, (std::vector<int>{0, 1}));
  EXPECT_EQ(all, (std::vector<int>{0, 0}));
  EXPECT_EQ(any_block, 1);
}

// Thread i writes its slot and then reads its neighbour's: with the barrier between, the same
// under both schedules; without it, what the neighbour wrote depends on who ran first.
template <bool BARRIER>
__global__ void neighbour(float* out) {
  COMBINER_DYNAMIC_SHARED(float, slot);
  const int tid = int(threadIdx.x);
  slot[tid] = float(tid);
  if (BARRIER) __syncthreads();
  out[tid] = slot[(tid + 1) % int(blockDim.x)];
}

std::vector<float> run_neighbour(bool barrier, Schedule schedule) {
  const ScheduleScope scope(schedule);
  std::vector<float> out(64, 0.f);
  if (barrier)
    COMBINER_LAUNCH(1, 64, 64 * sizeof(float), nullptr, neighbour<true>)(out.data());
  else
    COMBINER_LAUNCH(1, 64, 64 * sizeof(float), nullptr, neighbour<false>)(out.data());
  return out;
}

TEST(SimtEmulator, AMissingBarrierShowsAsADifferenceBetweenSchedules) {
  EXPECT_EQ(run_neighbour(true, Schedule::kForward), run_neighbour(true, Schedule::kReverse));
  EXPECT_NE(run_neighbour(false, Schedule::kForward), run_neighbour(false, Schedule::kReverse));
}

__global__ void uninitialised_shared(float* out) {
  COMBINER_DYNAMIC_SHARED(float, s);
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(SimtEmulator, SharedMemoryNoThreadWroteReadsAsNaN) {
  std::vector<float> out(32, 0.f);
  COMBINER_LAUNCH(1, 32, 32 * sizeof(float), nullptr, uninitialised_shared)(out.data());
  for (float v : out) EXPECT_TRUE(std::isnan(v));
}

__global__ void write_shared_at(int at) {
  COMBINER_DYNAMIC_SHARED(float, s);
  if (threadIdx.x == 0) s[at] = 1.f;
}

TEST(SimtEmulator, AWritePastTheDynamicSharedMemoryIsAnError) {
  COMBINER_LAUNCH(2, 32, 16 * sizeof(float), nullptr, write_shared_at)(15);  // the last float
  try {
    COMBINER_LAUNCH(2, 32, 16 * sizeof(float), nullptr, write_shared_at)(16);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "block (0, 0, 0) wrote past its 64 bytes of dynamic shared memory (byte 64)"),
              std::string::npos)
        << e.what();
  }
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 32) {
    out[threadIdx.x] = 1;
    __syncthreads();
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

__global__ void lane_returns_before_shuffle(float* out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, float(threadIdx.x), 1);
}

TEST(SimtEmulator, ThreadsAtDifferentBarriersAreAnError) {
  std::vector<int> out(64, 0);
  try {
    COMBINER_LAUNCH(1, 64, 0, nullptr, divergent_barrier)(out.data());
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("waits at the __syncthreads of"), std::string::npos)
        << e.what();
  }
}

TEST(SimtEmulator, ALaneMissingFromAShuffleIsAnError) {
  std::vector<float> out(32, 0.f);
  try {
    COMBINER_LAUNCH(1, 32, 0, nullptr, lane_returns_before_shuffle)(out.data());
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thread (3, 0, 0) has returned"), std::string::npos)
        << e.what();
  }
}

// cp.async: a copy lands when its thread waits for its group, the newest N groups left in flight.
__global__ void async_copies(const float* in, float* out, int waits) {
  COMBINER_DYNAMIC_SHARED(float, s);
  const int t = int(threadIdx.x);
  combiner::simt::cp_async(&s[t], &in[t], sizeof(float));
  combiner::simt::cp_async_commit();
  combiner::simt::cp_async(&s[32 + t], nullptr, sizeof(float));  // zeros
  combiner::simt::cp_async_commit();
  out[t] = s[t];  // not waited for yet
  if (waits >= 1) combiner::simt::cp_async_wait(1);
  out[32 + t] = s[t];
  out[64 + t] = s[32 + t];
  if (waits >= 2) combiner::simt::cp_async_wait(0);
  out[96 + t] = s[32 + t];
}

TEST(SimtEmulator, AsyncCopiesLandWhenWaitedFor) {
  std::vector<float> in(32), out(128, 7.f);
  for (int i = 0; i < 32; ++i) in[i] = float(i);
  COMBINER_LAUNCH(1, 32, 64 * sizeof(float), nullptr, async_copies)(in.data(), out.data(), 2);
  for (int t = 0; t < 32; ++t) {
    EXPECT_TRUE(std::isnan(out[t])) << t;       // before its wait: shared memory as it was
    EXPECT_EQ(out[32 + t], float(t));           // wait_group 1: the first group landed
    EXPECT_TRUE(std::isnan(out[64 + t])) << t;  // ... the second not yet
    EXPECT_EQ(out[96 + t], 0.f);                // wait_group 0: its zeros too
  }
  try {
    COMBINER_LAUNCH(1, 32, 64 * sizeof(float), nullptr, async_copies)(in.data(), out.data(), 1);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("returned with cp.async copies in flight"),
              std::string::npos)
        << e.what();
  }
}

__global__ void touch_shared(float* out) {
  COMBINER_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.f;
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(SimtEmulator, RefusesTheLaunchesAGpuRefuses) {
  std::vector<float> out(32, 0.f);
  COMBINER_LAUNCH(1, 32, 64 * 1024, nullptr, touch_shared)(out.data());  // over 48 KB
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(out[0], 0.f);
  COMBINER_LAUNCH(1, 2048, 0, nullptr, touch_shared)(out.data());  // over 1,024 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(
      cudaFuncSetAttribute(touch_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
      cudaSuccess);
  COMBINER_LAUNCH(1, 32, 64 * 1024, nullptr, touch_shared)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out[0], 1.f);
}

// One warp: C = A B + C through ldmatrix (A from row-major rows, B from B^T's rows, or B's rows
// with .trans) and mma, as kernel_tile.cuh's warp_nt and warp_nn use them.
template <bool TRANS>
__global__ void warp_matmul(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
  const int lane = int(threadIdx.x), g = lane / 4, q = lane % 4;
  uint32_t af[4], bf[4];
  // A [16 x 16] row-major: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (0-7, 8-15), (8-15,
  // 8-15).
  combiner::simt::ldmatrix_x4(af, a + (lane % 16) * 16 + (lane / 16) * 8, false);
  if (!TRANS) {  // b holds B^T [8 x 16] (n rows of k): matrices (k 0-7), (k 8-15), twice
    combiner::simt::ldmatrix_x4(bf, b + (lane % 8) * 16 + (lane / 8 % 2) * 8, false);
  } else {  // b holds B [16 x 8] row-major (k rows of n): .trans gives the same fragments
    combiner::simt::ldmatrix_x4(bf, b + (lane % 16) * 8, true);
  }
  float acc[4] = {
      c[g * 8 + 2 * q], c[g * 8 + 2 * q + 1], c[(g + 8) * 8 + 2 * q], c[(g + 8) * 8 + 2 * q + 1]};
  combiner::simt::mma_bf16(acc, af, bf[0], bf[1]);
  __syncwarp();
  c[g * 8 + 2 * q] = acc[0];
  c[g * 8 + 2 * q + 1] = acc[1];
  c[(g + 8) * 8 + 2 * q] = acc[2];
  c[(g + 8) * 8 + 2 * q + 1] = acc[3];
}

TEST(SimtEmulator, LdmatrixAndMmaMultiplyAsPlainLoops) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-8, 8);  // exact in bfloat16 and in the sums
  std::vector<__nv_bfloat16> a(16 * 16), bt(8 * 16), b(16 * 8);
  std::vector<float> A(16 * 16), B(16 * 8), c0(16 * 8);
  for (int i = 0; i < 16 * 16; ++i) a[i] = __float2bfloat16(A[i] = float(small(rng)));
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n) {
      B[k * 8 + n] = float(small(rng));
      b[k * 8 + n] = bt[n * 16 + k] = __float2bfloat16(B[k * 8 + n]);
    }
  for (auto& v : c0) v = float(small(rng));
  std::vector<float> want = c0;
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) want[i * 8 + n] += A[i * 16 + k] * B[k * 8 + n];
  std::vector<float> c = c0;
  COMBINER_LAUNCH(1, 32, 0, nullptr, warp_matmul<false>)(a.data(), bt.data(), c.data());
  EXPECT_EQ(c, want);
  c = c0;
  COMBINER_LAUNCH(1, 32, 0, nullptr, warp_matmul<true>)(a.data(), b.data(), c.data());
  EXPECT_EQ(c, want);
}

}  // namespace
