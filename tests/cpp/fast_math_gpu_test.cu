// tests/cpp/fast_math_gpu_test.cu — the softmax kernels' approximate functions
// (src/cuda/attention/fast_math.cuh) on the GPU against double precision on the host:
// exp2_poly (the FMA-pipe exp2 of MUFU-bound softmaxes) over every exponent the softmax can
// produce, its edges (a masked key's -inf must give exactly 0, so that an empty row's sum stays 0),
// and exp2_approx / tanh_approx within their documented error. Skips without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "src/cuda/attention/fast_math.cuh"

namespace attnkit::cuda::attn {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

enum class Fn { kExp2Poly, kExp2Approx, kTanhApprox };

__global__ void eval_kernel(Fn fn, const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = fn == Fn::kExp2Poly ? exp2_poly(x[i]) : fn == Fn::kExp2Approx ? exp2_approx(x[i]) : tanh_approx(x[i]);
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

// Every 2^-12 step of [-126, 0] (the softmax's exponents of kept keys, x = (s - max) * scale log2 e):
// relative error below 1.1e-4 (the cubic's 1.01e-4 plus float rounding), every value in (0, 1].
TEST(FastMathGpu, Exp2PolyRelativeErrorOverTheSoftmaxRange) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<float> x;
  for (int i = 0; i <= 126 * 4096; ++i) x.push_back(-float(i) / 4096.f);
  x.push_back(-0x1p-24f);  // rounding can leave an exponent a hair either side of 0
  x.push_back(0x1p-24f);
  const std::vector<float> y = eval(Fn::kExp2Poly, x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp2(double(x[i]));
    ASSERT_TRUE(y[i] > 0.f && y[i] <= 1.f + 1e-6f) << "x = " << x[i] << " y = " << y[i];
    worst = std::max(worst, std::abs(y[i] - ref) / ref);
  }
  EXPECT_LT(worst, 1.1e-4);
  std::printf("exp2_poly: max relative error %.3g over [-126, 0]\n", worst);
}

// Below the float range: exactly 0 at and below -127 (-inf: a masked key), and a non-negative value
// below 2^-125 in between — never the garbage an exponent-field underflow would give.
TEST(FastMathGpu, Exp2PolyEdges) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-inf, -1e30f, -1000.f, -128.f, -127.f};
  for (int i = 1; i < 256; ++i) x.push_back(-127.f + float(i) / 256.f);  // (-127, -126)
  const std::vector<float> y = eval(Fn::kExp2Poly, x);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(y[i], 0.f) << "x = " << x[i];
  for (size_t i = 5; i < x.size(); ++i) EXPECT_TRUE(y[i] >= 0.f && y[i] < 0x1p-125f) << "x = " << x[i] << " y = " << y[i];
  // exp2_poly(0) is 1 exactly: the row's maximum keeps weight 1, as with MUFU.EX2.
  EXPECT_EQ(eval(Fn::kExp2Poly, {0.f})[0], 1.f);
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
  const std::vector<float> t = eval(Fn::kTanhApprox, t_in);
  for (size_t i = 0; i < t_in.size(); ++i) {
    const double ref = std::tanh(double(t_in[i]));
    EXPECT_LE(std::abs(t[i] - ref), std::exp2(-10.9) * std::abs(ref) + 1e-30) << "x = " << t_in[i];
  }
  EXPECT_EQ(eval(Fn::kExp2Approx, {-std::numeric_limits<float>::infinity()})[0], 0.f);
}

}  // namespace
}  // namespace attnkit::cuda::attn
