// src/cuda/smem_optin.cuh — the opt-in to more than 48 KB of dynamic shared memory, made once per
// (kernel, device) rather than on every launch.
#pragma once
#include <cuda_runtime.h>

#include <atomic>

namespace attnkit::cuda {

// max_carveout: also ask for the largest shared-memory share of the SM's L1 (a kernel of several
// CTAs an SM that shared memory limits: the driver may otherwise pick a configuration that holds
// fewer of them — seen for GDN's dv_local: 168 KB, two CTAs where four fit).
template <auto Kernel>
cudaError_t ensure_dynamic_smem(int bytes, bool max_carveout = false) {
  static std::atomic<int> granted[64] = {};  // per device: bytes already granted
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);  // a thread-local read, no driver round trip
  if (err != cudaSuccess) return err;
  if (dev >= 0 && dev < 64 && granted[dev].load(std::memory_order_relaxed) >= bytes) return cudaSuccess;
  err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess && max_carveout)
    err = cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared));
  if (err == cudaSuccess && dev >= 0 && dev < 64) granted[dev].store(bytes, std::memory_order_relaxed);
  return err;
}

}  // namespace attnkit::cuda
