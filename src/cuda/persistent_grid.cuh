// src/cuda/persistent_grid.cuh — the grid of a persistent launch: as many CTAs as fit on the GPU
// at once, each then walking every gridDim.x-th work item.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {

// min(items, CTAs of `Kernel` resident at once) in `grid`; call after ensure_dynamic_smem (the
// occupancy query reads the kernel's shared-memory limit). The CTAs an SM are queried once per
// kernel (the devices we run on are one kind).
template <auto Kernel>
cudaError_t persistent_grid(int64_t items, int threads, int smem_bytes, int64_t& grid) {
  static std::atomic<int> cached{0};
  int per_sm = cached.load(std::memory_order_relaxed);
  if (per_sm == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem_bytes);
    if (err != cudaSuccess) return err;
    per_sm = std::max(per_sm, 1);
    cached.store(per_sm, std::memory_order_relaxed);
  }
  grid = std::min<int64_t>(items, int64_t(per_sm) * current_device_sm_count());
  return cudaSuccess;
}

}  // namespace attnkit::cuda
