// src/cuda/smem_optin.cuh — the opt-in to more than 48 KB of dynamic shared memory, made once per
// (kernel, device) rather than on every launch.
#pragma once
#include <cuda_runtime.h>

#include <atomic>

namespace attnkit::cuda {

template <auto Kernel>
cudaError_t ensure_dynamic_smem(int bytes) {
  static std::atomic<int> granted[64] = {};  // per device: bytes already granted
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);  // a thread-local read, no driver round trip
  if (err != cudaSuccess) return err;
  if (dev >= 0 && dev < 64 && granted[dev].load(std::memory_order_relaxed) >= bytes) return cudaSuccess;
  err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && dev >= 0 && dev < 64) granted[dev].store(bytes, std::memory_order_relaxed);
  return err;
}

}  // namespace attnkit::cuda
