// Host side of the fused kernels: the (dtype, D) dispatch onto template instances, and a launch
// that raises the dynamic shared-memory limit (once per kernel and device), launches on the
// caller's stream and turns a launch error into std::runtime_error naming the kernel.
#pragma once

#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "attention/fused/kernel.h"
#include "simt/cuda.h"

namespace combiner::attention::fused::cuda_detail {

template <typename T>
struct Type {
  using type = T;
};

template <typename Fn>
void dispatch(Dtype dtype, int64_t dim, const char* what, Fn&& fn) {
  auto with_dim = [&](auto type) {
    if (dim == 32) return fn(type, std::integral_constant<int, 32>{});
    if (dim == 64) return fn(type, std::integral_constant<int, 64>{});
    if (dim == 128) return fn(type, std::integral_constant<int, 128>{});
    throw std::invalid_argument(std::string(what) + ": head dim must be 32, 64 or 128, got " +
                                std::to_string(dim));
  };
  if (dtype == Dtype::kBFloat16) return with_dim(Type<__nv_bfloat16>{});
  if (dtype == Dtype::kFloat32) return with_dim(Type<float>{});
  throw std::invalid_argument(std::string(what) + ": the CUDA kernels take float32 or bfloat16");
}

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The dynamic shared-memory limit is an attribute of a kernel on a device: raised on the first
// launch there, not on every one (each instance asks for one constant size).
template <typename Arg>
void raise_smem_limit(void (*kernel)(Arg), size_t smem, const char* what) {
  static std::mutex mutex;
  static std::set<std::pair<const void*, int>> raised;  // (kernel, device)
  int device = 0;
  check(cudaGetDevice(&device), what);
  const std::pair<const void*, int> key(reinterpret_cast<const void*>(kernel), device);
  const std::lock_guard<std::mutex> lock(mutex);
  if (raised.count(key)) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), what);
  raised.insert(key);
}

template <typename Arg>
void launch(
    void (*kernel)(Arg), dim3 grid, size_t smem, void* stream, const char* what, const Arg& arg) {
  if (grid.x == 0 || grid.y == 0) return;
  if (smem > 48 * 1024) raise_smem_limit(kernel, smem, what);
  COMBINER_LAUNCH(grid, 128, smem, static_cast<cudaStream_t>(stream), kernel)(arg);
  check(cudaGetLastError(), what);
}

}  // namespace combiner::attention::fused::cuda_detail
