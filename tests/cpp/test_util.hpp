// tests/cpp/test_util.hpp — host tensors with random data, logical-order reads, error metrics.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/cpu/io.hpp"

namespace attnkit::test {

// An owning host tensor. With `perm`, memory is laid out in the order of dims perm[0..] (outermost
// first) while the view keeps the logical shape, which gives non-contiguous strides on purpose.
struct HostTensor {
  std::vector<unsigned char> buf;
  TensorView view;

  HostTensor() = default;
  HostTensor(DType dt, std::vector<int64_t> shape, std::vector<int> perm = {}) {
    const int nd = static_cast<int>(shape.size());
    if (perm.empty()) {
      perm.resize(nd);
      std::iota(perm.begin(), perm.end(), 0);
    }
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    buf.assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * dtype_size(dt), 0);
    view.data = buf.data();
    view.dtype = dt;
    view.ndim = nd;
    int64_t st = 1;
    for (int i = nd - 1; i >= 0; --i) {
      view.sizes[perm[i]] = shape[perm[i]];
      view.strides[perm[i]] = st;
      st *= shape[perm[i]];
    }
  }
  HostTensor(const HostTensor& o) : buf(o.buf), view(o.view) { view.data = buf.data(); }
  HostTensor& operator=(const HostTensor& o) {
    buf = o.buf;
    view = o.view;
    view.data = buf.data();
    return *this;
  }
  int64_t numel() const { return view.numel(); }

  // Element at logical flat index i (row-major over the logical shape).
  int64_t offset(int64_t i) const {
    int64_t off = 0;
    for (int d = view.ndim - 1; d >= 0; --d) {
      off += (i % view.sizes[d]) * view.strides[d];
      i /= view.sizes[d];
    }
    return off;
  }
  double get(int64_t i) const { return cpu::load<double>(view.data, view.dtype, offset(i)); }
  void set(int64_t i, double v) { cpu::store<double>(view.data, view.dtype, offset(i), v); }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t i = 0; i < numel(); ++i) v[i] = get(i);
    return v;
  }
  void fill(double v) {
    for (int64_t i = 0; i < numel(); ++i) set(i, v);
  }
  void randn(std::mt19937& rng, double scale = 1.0, double mean = 0.0) {
    std::normal_distribution<double> d(mean, scale);
    for (int64_t i = 0; i < numel(); ++i) set(i, d(rng));
  }
  void uniform(std::mt19937& rng, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    for (int64_t i = 0; i < numel(); ++i) set(i, d(rng));
  }
  // Same logical contents in another dtype / layout.
  HostTensor to(DType dt, std::vector<int> perm = {}) const {
    std::vector<int64_t> shape(view.sizes, view.sizes + view.ndim);
    HostTensor r(dt, shape, perm);
    for (int64_t i = 0; i < numel(); ++i) r.set(i, get(i));
    return r;
  }
};

// The same logical contents with every row (last dim) padded by `pad` elements: rows no longer
// start 16-byte aligned, which sends kernels down their element-wise load paths.
inline HostTensor padded_rows(const HostTensor& x, int64_t pad) {
  std::vector<int64_t> shape(x.view.sizes, x.view.sizes + x.view.ndim);
  shape.back() += pad;
  HostTensor r(x.view.dtype, shape);
  r.view.sizes[x.view.ndim - 1] -= pad;
  for (int64_t i = 0; i < x.numel(); ++i) r.set(i, x.get(i));
  return r;
}

inline HostTensor index_tensor(DType dt, const std::vector<int64_t>& vals) {
  HostTensor t(dt, {static_cast<int64_t>(vals.size())});
  for (size_t i = 0; i < vals.size(); ++i) t.set(static_cast<int64_t>(i), static_cast<double>(vals[i]));
  return t;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
// RMS(a - ref) / RMS(ref): the metric of flash-linear-attention's tests.
inline double rel_rms(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}
inline bool all_finite(const std::vector<double>& a) {
  for (double x : a)
    if (!std::isfinite(x)) return false;
  return true;
}

// Central difference of loss() in element i of x (restored afterwards).
template <class Loss>
double central_difference(HostTensor& x, int64_t i, const Loss& loss, double h = 1e-6) {
  const double x0 = x.get(i);
  x.set(i, x0 + h);
  const double lp = loss();
  x.set(i, x0 - h);
  const double lm = loss();
  x.set(i, x0);
  return (lp - lm) / (2 * h);
}

#define ASSERT_OK(expr)                                        \
  do {                                                         \
    ::attnkit::Status _st = (expr);                            \
    ASSERT_TRUE(_st.ok()) << "status: " << _st.message();      \
  } while (0)

}  // namespace attnkit::test
