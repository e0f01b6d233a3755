// tests/cpp/fast_math_gpu_test.cu — the softmax kernels' approximate functions on the GPU against
// double precision on the host: exp2_approx (src/cuda/attention/fast_math.cuh) and the softcap's
// softcap_tanh (attnkit/semantics/numerics.hpp) within PTX's stated error, and a masked key's
// exp2(-inf) exactly 0. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/attention/fast_math.cuh"

namespace attnkit::cuda::attn {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

enum class Fn { kExp2Approx, kSoftcapTanh };

__global__ void eval_kernel(Fn fn, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = fn == Fn::kExp2Approx ? exp2_approx(x[i]) : softcap_tanh(x[i]);
}

std::vector<float> eval(Fn fn, const std::vector<float>& x) {
  const int n = int(x.size());
  float *dx = nullptr, *dy = nullptr;
  EXPECT_EQ(cudaMalloc(&dx, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&dy, n * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(dy, 0xff, n * sizeof(float)), cudaSuccess);  // NaN poison: unwritten outputs fail
  eval_kernel<<<(n + 255) / 256, 256>>>(fn, dx, dy, n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> y(n);
  EXPECT_EQ(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(dx);
  cudaFree(dy);
  return y;
}

// The MUFU functions within PTX's stated bounds: ex2.approx relative 2^-22 (ftz: 0 below 2^-126),
// tanh.approx relative 2^-10.987.
TEST(FastMathGpu, MufuApproximationsWithinTheirBounds) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x;
  for (int i = 0; i <= 4000; ++i) x.push_back(-126.f + float(i) * (126.f / 4000.f));
  const std::vector<float> e = eval(Fn::kExp2Approx, x);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LE(std::abs(e[i] - std::exp2(double(x[i]))), 0x1p-21 * std::exp2(double(x[i]))) << "x = " << x[i];
  std::vector<float> t_in;
  for (int i = -4000; i <= 4000; ++i) t_in.push_back(float(i) / 400.f);  // [-10, 10]: tanh's curve and its tails
  const std::vector<float> t = eval(Fn::kSoftcapTanh, t_in);
  for (size_t i = 0; i < t_in.size(); ++i) {
    const double ref = std::tanh(double(t_in[i]));
    EXPECT_LE(std::abs(t[i] - ref), std::exp2(-10.9) * std::abs(ref) + 1e-30) << "x = " << t_in[i];
  }
  EXPECT_EQ(eval(Fn::kExp2Approx, {-std::numeric_limits<float>::infinity()})[0], 0.f);
}

}  // namespace
}  // namespace attnkit::cuda::attn
