// src/cuda/runtime.cu — CUDA runtime queries used by the host side.
#include <cuda_runtime.h>

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

}  // namespace attnkit::cuda
