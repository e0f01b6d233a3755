// examples/custom_mods.hpp — two flex functors of your own, shared by the CPU example
// (flex_custom_mod.cpp) and the GPU one (flex_custom_mod_cuda.cu). The contract is in
// attnkit/semantics/flex_mods.hpp: a score mod returns the modified score and writes its derivative
// (so gradients flow through it); a mask mod says which keys a query sees. ATTNKIT_HD makes them
// callable in device code as well.
#pragma once
#include <cstdint>

#include "attnkit/semantics/flex_mods.hpp"

// score + bias * (the distance q - kv, capped at 64)
struct CappedDistanceBias {
  float bias;
  template <class T>
  ATTNKIT_HD T operator()(T s, int64_t, int64_t, int64_t q, int64_t kv, T* ds) const {
    *ds = T(1);
    const int64_t d = q - kv < 64 ? q - kv : 64;
    return s + static_cast<T>(bias) * static_cast<T>(d);
  }
};

// causal, and every query also sees the first 4 "sink" tokens
struct CausalWithSinks {
  ATTNKIT_HD bool operator()(int64_t, int64_t, int64_t q, int64_t kv) const { return kv <= q || kv < 4; }
};
