// attnkit/semantics/numerics.hpp — constants and scalar rules every backend shares.
#pragma once
#include <cmath>
#include "attnkit/config.hpp"

namespace attnkit {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
constexpr double kL2NormEps = 1e-6;  // x / sqrt(sum x^2 + eps), as flash-linear-attention

// softcap(s) = c * tanh(s / c); c == 0 disables it. Returns d softcap / d s through *deriv.
template <class T>
ATTNKIT_HD T apply_softcap(T s, T cap, T* deriv) {
  if (cap <= T(0)) {
    *deriv = T(1);
    return s;
  }
  T t = std::tanh(s / cap);
  *deriv = T(1) - t * t;
  return cap * t;
}

// tanh of a float for the softcap: on the GPU one MUFU.TANH (tanh.approx.f32, relative error below
// 2^-10.9, as FlashAttention's softcap), not tanhf's EX2, RCP and a dozen FMAs — with the softmax's EX2
// that was three MUFU ops a score against the noop's one (docs/perf/flex_fwd.md v18, attention_fwd.md
// v18). Every GPU softcap comes here (flex and softmax attention, forward and backward), so a
// backward recomputes the probabilities its forward normalised; the CPU backend keeps std::tanh.
ATTNKIT_HD float softcap_tanh(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return std::tanh(x);
#endif
}

// softplus with the usual overflow guard (torch uses threshold 20).
template <class T>
ATTNKIT_HD T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}
template <class T>
ATTNKIT_HD T sigmoid(T x) {
  return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}

}  // namespace attnkit
