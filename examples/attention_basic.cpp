// examples/attention_basic.cpp — torch-free attnkit: causal GQA attention on host buffers.
// Build: part of the project (example_attention_basic). The same code runs on the GPU when the
// views point at device memory (Device::cuda()).
#include <cmath>
#include <cstdio>
#include <vector>

#include "attnkit/attnkit.hpp"

int main() {
  using namespace attnkit;
  const int64_t B = 1, S = 128, Hq = 8, Hkv = 2, D = 64;
  std::vector<float> q(B * S * Hq * D), k(B * S * Hkv * D), v(B * S * Hkv * D), out(B * S * Hq * D), lse(B * Hq * S);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.1f * i);
  for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.07f * i);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.03f * i);

  AttentionFwdParams p;
  p.q = TensorView::contiguous(q.data(), DType::kFloat32, Device::cpu(), {B, S, Hq, D});
  p.k = TensorView::contiguous(k.data(), DType::kFloat32, Device::cpu(), {B, S, Hkv, D});
  p.v = TensorView::contiguous(v.data(), DType::kFloat32, Device::cpu(), {B, S, Hkv, D});
  p.out = TensorView::contiguous(out.data(), DType::kFloat32, Device::cpu(), {B, S, Hq, D});
  p.lse = TensorView::contiguous(lse.data(), DType::kFloat32, Device::cpu(), {B, Hq, S});
  p.mask.causal = true;
  Status st = attention_forward(p);
  if (!st.ok()) {
    std::fprintf(stderr, "attention_forward failed: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("out[0, 5, 0, 0:4] = %.5f %.5f %.5f %.5f, lse[0, 0, 5] = %.5f\n", out[5 * Hq * D], out[5 * Hq * D + 1],
              out[5 * Hq * D + 2], out[5 * Hq * D + 3], lse[5]);

  p.mask.window_left = -5;  // bad input gets a clear error, never a crash
  st = attention_forward(p);
  std::printf("with window_left = -5: %s\n", st.message().c_str());
  return st.ok() ? 1 : 0;
}
