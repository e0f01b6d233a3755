// tests/cpp/wgmma_smoke_test.cu — runs the CuTe WGMMA smoke kernel on the GPU and checks it bit
// for bit (small integers are exact in bf16/fp16 and in the fp32 accumulator). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "src/cuda/common/wgmma_smoke.cuh"

namespace attnkit::cuda {
extern template cudaError_t launch_wgmma_smoke<cute::bfloat16_t>(const cute::bfloat16_t*, const cute::bfloat16_t*, float*, cudaStream_t);
extern template cudaError_t launch_wgmma_smoke<cute::half_t>(const cute::half_t*, const cute::half_t*, float*, cudaStream_t);
}  // namespace attnkit::cuda

namespace {

template <class Element>
void check_smoke() {
  if (!attnkit::cuda_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<Element> a(64 * 16), b(64 * 16);
  std::vector<float> ref(64 * 64, 0.f);
  for (auto& x : a) x = Element(static_cast<float>(d(rng)));
  for (auto& x : b) x = Element(static_cast<float>(d(rng)));
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < 64; ++n)
      for (int k = 0; k < 16; ++k) ref[m * 64 + n] += static_cast<float>(a[m * 16 + k]) * static_cast<float>(b[n * 16 + k]);
  Element *da, *db;
  float* dc;
  ASSERT_EQ(cudaMalloc(&da, a.size() * sizeof(Element)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, b.size() * sizeof(Element)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dc, ref.size() * sizeof(float)), cudaSuccess);
  cudaMemcpy(da, a.data(), a.size() * sizeof(Element), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * sizeof(Element), cudaMemcpyHostToDevice);
  cudaMemset(dc, 0xff, ref.size() * sizeof(float));  // NaN poison: unwritten outputs fail
  ASSERT_EQ(attnkit::cuda::launch_wgmma_smoke<Element>(da, db, dc, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> c(ref.size());
  cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < c.size(); ++i) ASSERT_EQ(c[i], ref[i]) << "element " << i;
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

TEST(WgmmaSmoke, Bf16MatchesHostGemm) { check_smoke<cute::bfloat16_t>(); }
TEST(WgmmaSmoke, Fp16MatchesHostGemm) { check_smoke<cute::half_t>(); }

}  // namespace
