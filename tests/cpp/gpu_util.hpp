// tests/cpp/gpu_util.hpp — device copies of HostTensors for GPU tests (CUDA runtime only).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

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

// The fixture of every GPU suite: its tests skip (not fail) where no CUDA device exists.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  }
};

// The forward error rule of the attention and flex GPU tests, against the CPU backend's float64
// run on the same rounded inputs: every output written and finite, the GPU's max error at most
// twice the CPU backend's own 16-bit run's plus 1e-3; LSE to 2e-3 relative, -inf where the
// reference row is empty.
inline void expect_forward_within_cpu16_error(const std::vector<double>& o_ref, const std::vector<double>& o_cpu16,
                                              const std::vector<double>& o_gpu, const std::vector<double>& l_ref,
                                              const std::vector<double>& l_gpu) {
  ASSERT_TRUE(all_finite(o_gpu)) << "unwritten or non-finite outputs";
  const double cpu_err = max_abs_diff(o_cpu16, o_ref), gpu_err = max_abs_diff(o_gpu, o_ref);
  EXPECT_LE(gpu_err, 2 * cpu_err + 1e-3) << "gpu max err " << gpu_err << " vs cpu-16bit " << cpu_err;
  for (size_t i = 0; i < l_ref.size(); ++i) {
    if (std::isinf(l_ref[i])) {
      ASSERT_TRUE(std::isinf(l_gpu[i]) && l_gpu[i] < 0) << "lse " << i << " = " << l_gpu[i];
    } else {
      ASSERT_NEAR(l_gpu[i], l_ref[i], 2e-3 * (1 + std::abs(l_ref[i]))) << "lse " << i;
    }
  }
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// The backward error rule of the attention and flex GPU tests, per gradient (dq, dk, dv): every
// value written and finite, the GPU's max error against the float64 reference at most twice the
// CPU backend's own 16-bit run's plus 1e-3 of the gradient's scale (max(1, max |reference|)).
inline void expect_grads_within_cpu16_error(const std::array<const HostTensor*, 3>& ref,
                                            const std::array<const HostTensor*, 3>& cpu16,
                                            const std::array<const HostTensor*, 3>& gpu) {
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    const auto vr = ref[i]->values(), vc = cpu16[i]->values(), vg = gpu[i]->values();
    ASSERT_TRUE(all_finite(vg)) << names[i] << ": unwritten or non-finite values";
    const double cpu_err = max_abs_diff(vc, vr), gpu_err = max_abs_diff(vg, vr);
    EXPECT_LE(gpu_err, 2 * cpu_err + 1e-3 * std::max(1.0, max_abs(vr)))
        << names[i] << ": gpu max err " << gpu_err << " vs cpu-16bit " << cpu_err << " (max |ref| " << max_abs(vr) << ")";
  }
}

// Strides a caller may legally pass but no kernel may use: a size-1 dim's (torch gives them any
// value, e.g. after unsqueeze or as_strided) set to 3 elements, which no 16-byte rule admits.
inline void set_odd_unit_strides(TensorView& v) {
  for (int d = 0; d + 1 < v.ndim; ++d)
    if (v.sizes[d] == 1) v.strides[d] = 3;
}

// Runs body() and expects no TMA descriptor to have been refused meanwhile (the driver refuses an
// empty dim or a stride that is no multiple of 16 bytes, and CuTe prints the refusal to stderr).
template <class Body>
void expect_no_tma_refusals(Body&& body) {
  testing::internal::CaptureStderr();
  body();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("TMA descriptor"), std::string::npos) << err;
}

}  // namespace attnkit::test
