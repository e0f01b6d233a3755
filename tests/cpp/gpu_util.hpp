// tests/cpp/gpu_util.hpp — device copies of HostTensors for GPU tests (CUDA runtime only).
#pragma once
#include <cuda_runtime.h>

#include "test_util.hpp"

namespace attnkit::test {

// A device buffer mirroring a HostTensor's layout (same strides, same bytes).
struct DeviceTensor {
  void* ptr = nullptr;
  size_t bytes = 0;
  TensorView view;
  explicit DeviceTensor(const HostTensor& h) : bytes(h.buf.size()), view(h.view) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, h.buf.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    view.data = ptr;
    view.device = Device::cuda(0);
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { cudaFree(ptr); }
  void poison() { EXPECT_EQ(cudaMemset(ptr, 0xff, bytes), cudaSuccess); }  // NaN in every float format
  void copy_to(HostTensor& h) const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.buf.data(), ptr, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
};

inline bool have_gpu() { return cuda_available(); }

}  // namespace attnkit::test
