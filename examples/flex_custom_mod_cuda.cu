// examples/flex_custom_mod_cuda.cu — flex attention on a Hopper GPU with your own score_mod and
// mask_mod functors (examples/custom_mods.hpp), checked against the CPU backend running the same
// functors. This translation unit instantiates one kernel: bfloat16, head dim 128, these functors.
// Build: link attnkit::cuda_kernels (examples/CMakeLists.txt). Exit status 77: no GPU found.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/cpu/flex_cpu.hpp"
#include "attnkit/cuda/flex_cuda.cuh"
#include "attnkit/numeric_types.hpp"
#include "custom_mods.hpp"

#define CHECK_CUDA(call)                                                               \
  do {                                                                                 \
    const cudaError_t e = (call);                                                      \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e));                 \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

int main() {
  using namespace attnkit;
  if (!cuda_available()) {
    std::printf("no CUDA device found: nothing to run (the CPU example is example_flex_custom_mod)\n");
    return 77;
  }
  const int64_t B = 2, H = 4, S = 1000, D = 128;
  const size_t n = B * H * S * D;
  // Inputs rounded to bfloat16 once: the GPU reads the bf16 bits, the CPU reference their values.
  std::vector<uint16_t> q16(n), k16(n), v16(n), o16(n);
  std::vector<float> q(n), k(n), v(n), o_ref(n), lse_ref(B * H * S);
  for (size_t i = 0; i < n; ++i) {
    q16[i] = float_to_bf16_bits(std::sin(0.37f * i));
    k16[i] = float_to_bf16_bits(std::cos(0.11f * i));
    v16[i] = float_to_bf16_bits(std::sin(0.05f * i + 1.f));
    q[i] = bf16_bits_to_float(q16[i]);
    k[i] = bf16_bits_to_float(k16[i]);
    v[i] = bf16_bits_to_float(v16[i]);
  }
  const CappedDistanceBias score_mod{-0.05f};
  const CausalWithSinks mask_mod{};

  // CPU reference (fp32).
  auto cpu_view = [&](std::vector<float>& x) { return TensorView::contiguous(x.data(), DType::kFloat32, Device::cpu(), {B, H, S, D}); };
  FlexFwdParams ref;
  ref.q = cpu_view(q);
  ref.k = cpu_view(k);
  ref.v = cpu_view(v);
  ref.out = cpu_view(o_ref);
  ref.lse = TensorView::contiguous(lse_ref.data(), DType::kFloat32, Device::cpu(), {B, H, S});
  Status st = cpu::flex_forward_with_mods(ref, score_mod, mask_mod);
  if (!st.ok()) return std::fprintf(stderr, "cpu: %s\n", st.message().c_str()), 1;

  // GPU: the same functors, instantiated here.
  void *dq, *dk, *dv, *dout, *dws;
  for (void** p : {&dq, &dk, &dv, &dout}) CHECK_CUDA(cudaMalloc(p, n * 2));
  CHECK_CUDA(cudaMemcpy(dq, q16.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dk, k16.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dv, v16.data(), n * 2, cudaMemcpyHostToDevice));
  auto gpu_view = [&](void* x) { return TensorView::contiguous(x, DType::kBFloat16, Device::cuda(0), {B, H, S, D}); };
  FlexFwdParams p;
  p.q = gpu_view(dq);
  p.k = gpu_view(dk);
  p.v = gpu_view(dv);
  p.out = gpu_view(dout);
  p.workspace.bytes = flex_forward_workspace_size(p);  // 16 bytes: the tile scheduler's counter
  CHECK_CUDA(cudaMalloc(&dws, p.workspace.bytes));
  p.workspace.data = dws;
  const Status gpu_st = attnkit::cuda::flex_forward_with_mods<DType::kBFloat16, 128>(p, score_mod, mask_mod);  // (::cuda: libcu++)
  if (!gpu_st.ok()) return std::fprintf(stderr, "gpu: %s\n", gpu_st.message().c_str()), 1;
  CHECK_CUDA(cudaMemcpy(o16.data(), dout, n * 2, cudaMemcpyDeviceToHost));

  double max_err = 0;
  for (size_t i = 0; i < n; ++i) max_err = std::fmax(max_err, std::fabs(bf16_bits_to_float(o16[i]) - o_ref[i]));
  for (void* x : {dq, dk, dv, dout, dws}) cudaFree(x);
  // bf16 output rounding is 2^-9 relative; outputs here are below 1 in magnitude.
  const bool ok = max_err <= 1e-2;
  std::printf("out[0, 0, 500, 0] = %.5f (cpu %.5f); max |gpu - cpu| = %.2e: %s\n",
              bf16_bits_to_float(o16[500 * D]), o_ref[500 * D], max_err, ok ? "ok" : "TOO LARGE");
  return ok ? 0 : 1;
}
