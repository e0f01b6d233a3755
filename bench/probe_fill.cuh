// bench/probe_fill.cuh — the attention probes' inputs: a hash of the element index, uniform in
// [-1.7, 1.7), the same values on every run and device (nothing to seed), in any element type
// constructible from float.
#pragma once
#include <cstddef>
#include <cstdint>

template <class Elt>
__global__ void fill(Elt* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13; x *= 0x5bd1e995; x ^= x >> 15;
    p[i] = Elt((float(x & 0xffff) / 65536.f - 0.5f) * 3.4f);
  }
}
