// bench/gdn_decode_probe.cu — the CUDA GDN decode kernel alone, for quick looks on the device:
// one token per sequence, K = V = 128, bf16 q/k/v, l2norm, scalar gate, fp32 K-first state.
//
//   gdn_decode_probe B H [reps]   median ms of `reps` launches (events), the state traffic's
//                                 TB/s against a device-to-device copy of the same bytes in the
//                                 same process, and the first launch's error against a float64
//                                 recurrence step (rel RMS of o and of the new state); then
//                                 both timed queued, 20 launches back to back
// Build: bash bench/gdn_decode_probe.sh. Not a test: tests/cpp/gdn_gpu_test.cpp checks the decode.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "attnkit/numeric_types.hpp"
#include "src/cuda/gdn/api.hpp"

using namespace attnkit;

namespace {

float median_ms(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t B = argc > 1 ? std::atoll(argv[1]) : 64, H = argc > 2 ? std::atoll(argv[2]) : 32, D = 128;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 200;
  const int64_t nq = B * H * D, ns = B * H * D * D;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> unit;
  std::vector<uint16_t> q(nq), k(nq), v(nq), beta(B * H);
  std::vector<float> g(B * H), h0(ns);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = float_to_bf16_bits(normal(rng));
  for (auto& e : g) e = -0.1f * unit(rng);
  for (auto& e : beta) e = float_to_bf16_bits(0.5f + 0.5f * unit(rng));
  for (auto& e : h0) e = 0.1f * normal(rng);
  void *dq, *dk, *dv, *dg, *db, *ds, *dout, *copy_dst;
  cudaMalloc(&dq, nq * 2);
  cudaMalloc(&dk, nq * 2);
  cudaMalloc(&dv, nq * 2);
  cudaMalloc(&dg, B * H * 4);
  cudaMalloc(&db, B * H * 2);
  cudaMalloc(&ds, ns * 4);
  cudaMalloc(&dout, nq * 2);
  cudaMalloc(&copy_dst, ns * 4);
  cudaMemcpy(dq, q.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dk, k.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, v.data(), nq * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dg, g.data(), B * H * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(db, beta.data(), B * H * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(ds, h0.data(), ns * 4, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, nq * 2);
  const Device dev = Device::cuda(0);
  GdnDecodeParams p;
  p.q = TensorView::contiguous(dq, DType::kBFloat16, dev, {B, 1, H, D});
  p.k = TensorView::contiguous(dk, DType::kBFloat16, dev, {B, 1, H, D});
  p.v = TensorView::contiguous(dv, DType::kBFloat16, dev, {B, 1, H, D});
  p.g = TensorView::contiguous(dg, DType::kFloat32, dev, {B, 1, H});
  p.beta = TensorView::contiguous(db, DType::kBFloat16, dev, {B, 1, H});
  p.state = TensorView::contiguous(ds, DType::kFloat32, dev, {B, H, D, D});
  p.out = TensorView::contiguous(dout, DType::kBFloat16, dev, {B, 1, H, D});
  p.use_qk_l2norm = true;

  // The first launch against a float64 step from h0.
  if (const Status st = cuda::gdn_decode(p); !st.ok()) {
    std::fprintf(stderr, "gdn_decode: %s\n", st.message().c_str());
    return 1;
  }
  if (const cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess) {
    std::fprintf(stderr, "%s\n", cudaGetErrorString(err));
    return 1;
  }
  std::vector<uint16_t> out(nq);
  std::vector<float> h1(ns);
  cudaMemcpy(out.data(), dout, nq * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(h1.data(), ds, ns * 4, cudaMemcpyDeviceToHost);
  double eo = 0, ro = 0, eh = 0, rh = 0;
  std::vector<double> S(D * D), qn(D), kn(D);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t i = 0; i < B * H; ++i) {
    double sq = 0, sk = 0;
    for (int64_t d = 0; d < D; ++d) {
      qn[d] = bf16_bits_to_float(q[i * D + d]), kn[d] = bf16_bits_to_float(k[i * D + d]);
      sq += qn[d] * qn[d], sk += kn[d] * kn[d];
    }
    for (int64_t d = 0; d < D; ++d) qn[d] /= std::sqrt(sq + 1e-6), kn[d] /= std::sqrt(sk + 1e-6);
    const double decay = std::exp(double(g[i])), b = bf16_bits_to_float(beta[i]);
    for (int64_t e = 0; e < D * D; ++e) S[e] = decay * h0[i * D * D + e];
    for (int64_t c = 0; c < D; ++c) {
      double pk = 0;
      for (int64_t r = 0; r < D; ++r) pk += S[r * D + c] * kn[r];
      const double u = b * (bf16_bits_to_float(v[i * D + c]) - pk);
      double o = 0;
      for (int64_t r = 0; r < D; ++r) {
        S[r * D + c] += kn[r] * u;
        o += S[r * D + c] * qn[r];
      }
      o *= scale;
      const double x = bf16_bits_to_float(out[i * D + c]) - o;
      eo += x * x, ro += o * o;
    }
    for (int64_t e = 0; e < D * D; ++e) {
      const double x = h1[i * D * D + e] - S[e];
      eh += x * x, rh += S[e] * S[e];
    }
  }

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> ms, copy_ms;
  for (int r = 0; r < reps + 5; ++r) {
    float t = 0;
    cudaEventRecord(start);
    (void)cuda::gdn_decode(p);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&t, start, stop);
    if (r >= 5) ms.push_back(t);
    cudaEventRecord(start);
    cudaMemcpyAsync(copy_dst, ds, ns * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&t, start, stop);
    if (r >= 5) copy_ms.push_back(t);
  }
  // Queued launches (the GPU never waits for the host, as in a model or do_bench behind its cache
  // flush): 20 back to back between two events, per launch.
  auto queued_ms = [&](auto&& launch) {
    float t = 0;
    cudaEventRecord(start);
    for (int i = 0; i < 20; ++i) launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    cudaEventElapsedTime(&t, start, stop);
    return t / 20;
  };
  std::vector<float> qms, qcopy;
  for (int r = 0; r < 7; ++r) {
    qms.push_back(queued_ms([&] { (void)cuda::gdn_decode(p); }));
    qcopy.push_back(queued_ms([&] { cudaMemcpyAsync(copy_dst, ds, ns * 4, cudaMemcpyDeviceToDevice); }));
  }
  const double bytes = 2.0 * ns * 4, t = median_ms(ms), tc = median_ms(copy_ms);
  std::printf("queued: decode %.4f ms, copy %.4f ms, %.1f%% of copy\n", median_ms(qms), median_ms(qcopy),
              100.0 * median_ms(qcopy) / median_ms(qms));
  std::printf("decode B%lld H%lld K=V=128: %.4f ms, state %.2f TB/s; copy %.4f ms, %.2f TB/s; %.1f%% of copy; "
              "vs float64: o %.2e, state %.2e\n",
              (long long)B, (long long)H, t, bytes / t / 1e9, tc, bytes / tc / 1e9, 100.0 * tc / t, std::sqrt(eo / ro),
              std::sqrt(eh / rh));
  return 0;
}
