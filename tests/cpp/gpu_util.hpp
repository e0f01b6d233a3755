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

// Raw device scratch for an op's workspace, NaN-poisoned so that reading what the op never wrote
// shows in its outputs.
struct DeviceScratch {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceScratch(size_t n) : bytes(n) {
    if (n == 0) return;
    EXPECT_EQ(cudaMalloc(&ptr, n), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0xff, n), cudaSuccess);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() { cudaFree(ptr); }
  Workspace workspace() const { return {ptr, bytes}; }
};

inline bool have_gpu() { return cuda_available(); }

}  // namespace attnkit::test
