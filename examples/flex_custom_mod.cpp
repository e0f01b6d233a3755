// examples/flex_custom_mod.cpp — flex attention on the CPU with your own score_mod and mask_mod
// functors (examples/custom_mods.hpp; flex_custom_mod_cuda.cu runs the same ones on the GPU).
#include <cstdio>
#include <vector>

#include "attnkit/cpu/flex_cpu.hpp"
#include "custom_mods.hpp"

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
