// src/cuda/runtime.cu — CUDA runtime queries used by the host side.
#include <cuda_runtime.h>

#include <atomic>

#include "src/cuda/runtime.hpp"

namespace attnkit::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

double current_device_dram_tbps() {
  static std::atomic<double> cache[64] = {};  // 0: not queried yet (or unknown)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0.0;
  double tbps = cache[dev].load(std::memory_order_relaxed);
  if (tbps == 0.0) {
    int khz = 0, bits = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
      tbps = 2.0 * khz * 1e3 * (bits / 8.0) / 1e12;  // double data rate
    cache[dev].store(tbps, std::memory_order_relaxed);
  }
  return tbps;
}

int current_device_sm_count() {
  static std::atomic<int> cache[64] = {};  // 0: not queried yet
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 1;
  int n = cache[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 1;
    cache[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace attnkit::cuda
