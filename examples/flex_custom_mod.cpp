// examples/flex_custom_mod.cpp — flex attention with your own score_mod and mask_mod functors.
// The functor contract is in attnkit/semantics/flex_mods.hpp: a score mod returns the modified
// score and its derivative (so gradients flow through it); a mask mod says which keys are visible.
// Mark them ATTNKIT_HD so the same functor can drive the GPU kernels in your own .cu file.
#include <cstdio>
#include <vector>

#include "attnkit/cpu/flex_cpu.hpp"

// score + bias * (number of "tokens" between q and kv, capped at 64)
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

int main() {
  using namespace attnkit;
  const int64_t B = 1, H = 2, S = 100, D = 32;
  std::vector<double> q(B * H * S * D), k(q.size()), v(q.size()), out(q.size()), dq(q.size()), dk(q.size()), dv(q.size());
  std::vector<float> lse(B * H * S);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = 0.01 * static_cast<double>(i % 17);
    k[i] = 0.02 * static_cast<double>(i % 13);
    v[i] = 0.03 * static_cast<double>(i % 11);
  }
  auto view = [&](std::vector<double>& x) { return TensorView::contiguous(x.data(), DType::kFloat64, Device::cpu(), {B, H, S, D}); };
  FlexFwdParams p;
  p.q = view(q);
  p.k = view(k);
  p.v = view(v);
  p.out = view(out);
  p.lse = TensorView::contiguous(lse.data(), DType::kFloat32, Device::cpu(), {B, H, S});
  Status st = cpu::flex_forward_with_mods(p, CappedDistanceBias{-0.05f}, CausalWithSinks{});
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  FlexBwdParams b;
  b.q = p.q;
  b.k = p.k;
  b.v = p.v;
  b.out = p.out;
  b.lse = p.lse;
  b.dout = view(out);  // d loss / d out = out, i.e. loss = |out|^2 / 2
  b.dq = view(dq);
  b.dk = view(dk);
  b.dv = view(dv);
  st = cpu::flex_backward_with_mods(b, CappedDistanceBias{-0.05f}, CausalWithSinks{});
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  std::printf("out[0, 0, 50, 0] = %.6f  lse[0, 0, 50] = %.6f  dq[0, 0, 50, 0] = %.6g\n", out[50 * D], lse[50], dq[50 * D]);
  return 0;
}
