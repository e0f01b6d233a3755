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
