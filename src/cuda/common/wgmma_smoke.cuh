// src/cuda/common/wgmma_smoke.cuh — the smallest CuTe Hopper kernel: one warpgroup multiplies
// C[64, 64] = A[64, 16] . B[64, 16]^T with one SM90 WGMMA reading both operands from swizzled
// shared memory. It proves the toolchain (CuTe headers, sm_90a, wgmma) and the GPU test path.
#pragma once
#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

namespace attnkit::cuda {

template <class Element>
struct WgmmaSmokeMma;
template <>
struct WgmmaSmokeMma<cute::bfloat16_t> {
  using Op = cute::SM90_64x64x16_F32BF16BF16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>;
};
template <>
struct WgmmaSmokeMma<cute::half_t> {
  using Op = cute::SM90_64x64x16_F32F16F16_SS<cute::GMMA::Major::K, cute::GMMA::Major::K>;
};

template <class Element>
__global__ void __launch_bounds__(128) wgmma_smoke_kernel(const Element* A, const Element* B, float* C) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace cute;
  __shared__ alignas(128) Element smem_a[64 * 16];
  __shared__ alignas(128) Element smem_b[64 * 16];
  // [64, 16] K-major tiles, 32-byte swizzle (16 bf16 = 32 bytes per row).
  auto s_layout = tile_to_shape(GMMA::Layout_K_SW32_Atom<Element>{}, make_shape(Int<64>{}, Int<16>{}));
  Tensor gA = make_tensor(make_gmem_ptr(A), make_shape(Int<64>{}, Int<16>{}), make_stride(Int<16>{}, Int<1>{}));  // [64, 16]
  Tensor gB = make_tensor(make_gmem_ptr(B), make_shape(Int<64>{}, Int<16>{}), make_stride(Int<16>{}, Int<1>{}));  // [64, 16]
  Tensor gC = make_tensor(make_gmem_ptr(C), make_shape(Int<64>{}, Int<64>{}), make_stride(Int<64>{}, Int<1>{}));  // [64, 64]
  Tensor sA = make_tensor(make_smem_ptr(smem_a), s_layout);  // [64, 16] swizzled
  Tensor sB = make_tensor(make_smem_ptr(smem_b), s_layout);  // [64, 16] swizzled
  for (int i = threadIdx.x; i < 64 * 16; i += 128) {
    sA(i) = gA(i);
    sB(i) = gB(i);
  }
  __syncthreads();
  cutlass::arch::fence_view_async_shared();  // make the generic-proxy stores visible to wgmma

  TiledMMA mma = make_tiled_mma(typename WgmmaSmokeMma<Element>::Op{});
  ThrMMA thr = mma.get_thread_slice(threadIdx.x);
  Tensor tCrA = thr.make_fragment_A(thr.partition_A(sA));  // smem descriptors
  Tensor tCrB = thr.make_fragment_B(thr.partition_B(sB));
  Tensor tCgC = thr.partition_C(gC);
  Tensor tCrC = thr.make_fragment_C(tCgC);                 // fp32 accumulators in registers
  clear(tCrC);
  warpgroup_fence_operand(tCrC);
  warpgroup_arrive();
  gemm(mma, tCrA, tCrB, tCrC);
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  warpgroup_fence_operand(tCrC);
  copy(tCrC, tCgC);
#endif
}

// A, B: device [64, 16]; C: device [64, 64] fp32.
template <class Element>
cudaError_t launch_wgmma_smoke(const Element* A, const Element* B, float* C, cudaStream_t stream) {
  wgmma_smoke_kernel<Element><<<1, 128, 0, stream>>>(A, B, C);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda
