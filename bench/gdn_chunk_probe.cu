// bench/gdn_chunk_probe.cu — the CUDA chunked GDN forward alone, for quick looks on the device:
// builds from its own few translation units in under a minute (bench/gdn_chunk_probe.sh), times
// the forward with events (median), and gives ncu a short process to profile.
//
//   gdn_chunk_probe B T H [reps [dump]]   (K = V = 128, bf16, l2norm, scalar gate, final state)
// With `dump`, writes the output (bf16) and the final state (fp32) to dump.o / dump.ht, raw, to
// compare two builds (bench/gdn_chunk_probe.sh PROBE_REF=...).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "src/cuda/gdn/api.hpp"

using namespace attnkit;

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 4, T = argc > 2 ? std::atoll(argv[2]) : 8192;
  const int64_t H = argc > 3 ? std::atoll(argv[3]) : 16, D = 128;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 20;
  const int64_t n = B * T * H * D, ng = B * T * H;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit;
  auto bf16 = [](float x) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  };
  std::vector<uint16_t> x(n), beta(ng);
  std::vector<float> g(ng);
  for (auto& e : x) e = bf16(normal(rng));
  for (auto& e : g) e = -0.1f * unit(rng);
  for (auto& e : beta) e = bf16(0.5f + 0.5f * unit(rng));
  void *q, *k, *v, *o, *gd, *bd, *ht, *ws;
  for (void** p : {&q, &k, &v, &o}) cudaMalloc(p, n * 2);
  cudaMalloc(&gd, ng * 4);
  cudaMalloc(&bd, ng * 2);
  cudaMalloc(&ht, B * H * D * D * 4);
  for (void* p : {q, k, v}) cudaMemcpy(p, x.data(), n * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(gd, g.data(), ng * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(bd, beta.data(), ng * 2, cudaMemcpyHostToDevice);
  const Device dev = Device::cuda(0);
  GdnFwdParams p;
  p.in.q = TensorView::contiguous(q, DType::kBFloat16, dev, {B, T, H, D});
  p.in.k = TensorView::contiguous(k, DType::kBFloat16, dev, {B, T, H, D});
  p.in.v = TensorView::contiguous(v, DType::kBFloat16, dev, {B, T, H, D});
  p.in.g = TensorView::contiguous(gd, DType::kFloat32, dev, {B, T, H});
  p.in.beta = TensorView::contiguous(bd, DType::kBFloat16, dev, {B, T, H});
  p.in.use_qk_l2norm = true;
  p.out = TensorView::contiguous(o, DType::kBFloat16, dev, {B, T, H, D});
  p.final_state = TensorView::contiguous(ht, DType::kFloat32, dev, {B, H, D, D});
  const size_t ws_bytes = cuda::gdn_forward_workspace_size(p);
  cudaMalloc(&ws, ws_bytes);
  p.workspace = {ws, ws_bytes};

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms;
  for (int r = 0; r < reps + 2; ++r) {
    cudaEventRecord(start);
    const Status st = cuda::gdn_forward(p);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    if (!st.ok()) {
      std::fprintf(stderr, "gdn_forward: %s\n", st.message().c_str());
      return 1;
    }
    float t = 0;
    cudaEventElapsedTime(&t, start, stop);
    if (r >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("B%lld T%lld H%lld K=V=128 bf16: %.4f ms (median of %d)\n", (long long)B, (long long)T, (long long)H,
              ms[ms.size() / 2], reps);
  if (argc > 5) {
    std::vector<uint16_t> out(n);
    std::vector<float> state(B * H * D * D);
    cudaMemcpy(out.data(), o, n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(state.data(), ht, state.size() * 4, cudaMemcpyDeviceToHost);
    const std::string path = argv[5];
    std::FILE* f = std::fopen((path + ".o").c_str(), "wb");
    std::fwrite(out.data(), 2, out.size(), f);
    std::fclose(f);
    f = std::fopen((path + ".ht").c_str(), "wb");
    std::fwrite(state.data(), 4, state.size(), f);
    std::fclose(f);
  }
  for (void* ptr : {q, k, v, o, gd, bd, ht, ws}) cudaFree(ptr);
  return 0;
}
