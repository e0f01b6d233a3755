// attnkit/tensor.hpp — TensorView: a non-owning view of a strided tensor (no PyTorch needed).
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace attnkit {

enum class DType : uint8_t { kFloat16, kBFloat16, kFloat32, kFloat64, kInt32, kInt64 };
enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

const char* dtype_name(DType t);
size_t dtype_size(DType t);
inline bool is_floating(DType t) { return t <= DType::kFloat64; }

// Sizes and strides are in elements, int64. A default-constructed view is "absent" (ndim == 0):
// optional arguments (LSE, initial state, ...) are left absent to mean "not given".
struct TensorView {
  static constexpr int kMaxDims = 6;
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  bool defined() const { return ndim > 0; }
  int64_t size(int d) const { return sizes[d < 0 ? d + ndim : d]; }
  int64_t stride(int d) const { return strides[d < 0 ? d + ndim : d]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (sizes[i] != 1 && strides[i] != expect) return false;
      expect *= sizes[i];
    }
    return true;
  }

  // A row-major (contiguous) view of `data`.
  static TensorView contiguous(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape) {
    TensorView t;
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.ndim = static_cast<int>(shape.size());
    int i = 0;
    for (int64_t s : shape) t.sizes[i++] = s;
    int64_t st = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      t.strides[d] = st;
      st *= t.sizes[d];
    }
    return t;
  }
  // The same memory seen with dims a and b exchanged (e.g. BSHD <-> BHSD).
  TensorView transposed(int a, int b) const {
    TensorView t = *this;
    t.sizes[a] = sizes[b];
    t.sizes[b] = sizes[a];
    t.strides[a] = strides[b];
    t.strides[b] = strides[a];
    return t;
  }
};

// Caller-provided scratch memory on the op's device; query the size with *_workspace_size().
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// A CUDA stream as an opaque handle (cudaStream_t), so these headers need no CUDA includes.
// nullptr is the default stream. Ignored by the CPU backend.
using Stream = void*;

}  // namespace attnkit
