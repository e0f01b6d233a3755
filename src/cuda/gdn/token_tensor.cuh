// src/cuda/gdn/token_tensor.cuh — reading the GDN kernels' small float inputs (gates, beta,
// initial states) of any float dtype by element, and [B, T, heads(, F)] tensors by (b, t, head, f).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attnkit/tensor.hpp"

namespace attnkit::cuda {

// A float-like input of any of our dtypes, read by element index.
struct AnyFloat {
  const void* ptr = nullptr;
  DType dtype = DType::kFloat32;
  __device__ float operator[](int64_t i) const {
    switch (dtype) {
      case DType::kBFloat16: {
        const unsigned short b = static_cast<const unsigned short*>(ptr)[i];
        return __uint_as_float(static_cast<unsigned>(b) << 16);
      }
      case DType::kFloat16: return __half2float(static_cast<const __half*>(ptr)[i]);
      case DType::kFloat64: return static_cast<float>(static_cast<const double*>(ptr)[i]);
      default: return static_cast<const float*>(ptr)[i];
    }
  }
  // Element i as raw bits, converted by from_bits where the value is used: a 16-bit element's own
  // bits (its conversion, the load's first use, would wait for the load right here), a float's
  // bits otherwise (a double converted at once).
  __device__ uint32_t bits(int64_t i) const {
    switch (dtype) {
      case DType::kBFloat16:
      case DType::kFloat16: return static_cast<const unsigned short*>(ptr)[i];
      case DType::kFloat64: return __float_as_uint(static_cast<float>(static_cast<const double*>(ptr)[i]));
      default: return static_cast<const uint32_t*>(ptr)[i];
    }
  }
  __device__ float from_bits(uint32_t b) const {
    switch (dtype) {
      case DType::kBFloat16: return __uint_as_float(b << 16);
      case DType::kFloat16: return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
      default: return __uint_as_float(b);
    }
  }
  __device__ const char* address(int64_t i) const {
    const int64_t size = dtype == DType::kFloat64 ? 8 : dtype == DType::kFloat32 ? 4 : 2;
    return static_cast<const char*>(ptr) + i * size;
  }
};

// kN elements x[base + offset(i)], i = 0 .. kN - 1, each handed to set(i, value): the dtype
// switched on once for all of them, so that the loads are plain and all in flight together. Taken
// per element (AnyFloat's operator[]), the switch put ~16 instructions and four branches on every
// load: ~1.5k instructions of a state warpgroup's 64-element start (h0, dht) before its first GEMM,
// paid once a CTA, on the chain (docs/perf/gdn_bwd_dhu.md, the varlen case). Same values as
// operator[].
template <int kN, class Offset, class Set>
__device__ __forceinline__ void load_any_floats(const AnyFloat& x, int64_t base, Offset&& offset, Set&& set) {
  switch (x.dtype) {
    case DType::kBFloat16: {
      const auto* p = static_cast<const unsigned short*>(x.ptr) + base;
#pragma unroll
      for (int i = 0; i < kN; ++i) set(i, __uint_as_float(static_cast<unsigned>(p[offset(i)]) << 16));
      break;
    }
    case DType::kFloat16: {
      const __half* p = static_cast<const __half*>(x.ptr) + base;
#pragma unroll
      for (int i = 0; i < kN; ++i) set(i, __half2float(p[offset(i)]));
      break;
    }
    case DType::kFloat64: {
      const double* p = static_cast<const double*>(x.ptr) + base;
#pragma unroll
      for (int i = 0; i < kN; ++i) set(i, static_cast<float>(p[offset(i)]));
      break;
    }
    default: {
      const float* p = static_cast<const float*>(x.ptr) + base;
#pragma unroll
      for (int i = 0; i < kN; ++i) set(i, p[offset(i)]);
    }
  }
}

// A [B, T, heads, F] tensor (or [B, T, heads] with F = 1): strides of (b, t, head).
struct TokenTensor {
  AnyFloat data;
  int64_t sb = 0, st = 0, sh = 0;
  __device__ float at(int64_t b, int64_t t, int64_t h, int64_t f = 0) const { return data[b * sb + t * st + h * sh + f]; }
  __device__ uint32_t bits_at(int64_t b, int64_t t, int64_t h) const { return data.bits(b * sb + t * st + h * sh); }
  // Asks L2 for elements f = 0 .. n-1 of (b, t, h) ahead of their use (no registers, no wait).
  __device__ void prefetch_l2(int64_t b, int64_t t, int64_t h, int n = 1) const {
    if (data.ptr == nullptr) return;
    const char* first = data.address(b * sb + t * st + h * sh);
    const char* last = data.address(b * sb + t * st + h * sh + n - 1);
    for (const char* p = first; p < last; p += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(last));
  }
};

// Varlen tensors have B == 1: their batch stride is never used and reads as 0.
inline TokenTensor token_tensor(const TensorView& t, bool varlen) {
  TokenTensor r;
  if (!t.defined()) return r;
  r.data = {t.data, t.dtype};
  r.sb = varlen ? 0 : t.strides[0];
  r.st = t.strides[1];
  r.sh = t.strides[2];
  return r;
}

}  // namespace attnkit::cuda
