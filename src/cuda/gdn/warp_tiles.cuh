// src/cuda/gdn/warp_tiles.cuh — small warp-level tile code for the chunked backward's per-chunk
// kernels: 16-bit matrices in shared memory with padded rows, ldmatrix fragment loads (plain or
// transposed, so one stored matrix serves as X and as X^T), mma.sync m16n8k16 with fp32
// accumulation, and the (row, column) of every accumulator element.
//
// The per-chunk products are many small GEMMs over [64, D] and [64, 64] tiles that read the same
// stored matrices in both orientations (dP and dP^T, T and T^T, K as B and as B^T); register
// fragments loaded by ldmatrix make every orientation a choice of address and .trans, with no
// swizzle bookkeeping. A warp owns 16 rows of an output and a span of its columns.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cutlass/numeric_types.h>

#include <cstdint>

#include "src/cuda/gdn/chunk_fwd_traits.cuh"  // pack2

namespace attnkit::cuda::gdn::tiles {

// A [rows, cols] row-major 16-bit matrix at shared address `base`, rows padded by 8 elements
// (16 bytes): the 8 rows an ldmatrix reads start 4 banks apart, so no bank conflicts.
template <int kRows, int kCols>
struct SmemMat {
  static constexpr int kPitch = kCols + 8;  // elements
  static constexpr int kBytes = kRows * kPitch * 2;
  uint32_t base;
  __device__ uint32_t at(int r, int c) const { return base + uint32_t(r * kPitch + c) * 2u; }
};

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

template <class E>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<E, cutlass::bfloat16_t>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// How a GEMM operand sits in shared memory. For A [M, K]: kRowMajor stores A (row m, column k),
// kTransposed stores A^T. For B [K, N]: kRowMajor stores B^T (row n, column k: "the rows are the
// output's columns", e.g. K for Q K^T), kTransposed stores B itself (row k, column n).
enum class Stored { kRowMajor, kTransposed };

// An accumulator of one warp: 16 rows x kN columns, fp32, in mma.sync's C layout. Element e of
// n-tile t sits at row m0 + lane / 4 + 8 * (e / 2), column n0 + 8 t + 2 (lane % 4) + e % 2.
template <int kN>
struct Acc {
  static constexpr int kTiles = kN / 8;
  float c[kTiles][4];
  __device__ void zero() {
#pragma unroll
    for (int t = 0; t < kTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) c[t][e] = 0.f;
  }
  static __device__ int row(int e) { return (threadIdx.x % 32) / 4 + 8 * (e / 2); }        // + m0
  static __device__ int col(int t, int e) { return 8 * t + 2 * (threadIdx.x % 4) + e % 2; }  // + n0
};

// acc [16, kN] += A[m0 .. m0 + 16, 0 .. kK] B[0 .. kK, n0 .. n0 + kN] (kN a multiple of 16).
template <class E, int kK, Stored kA, Stored kB, int kN, class MA, class MB>
__device__ __forceinline__ void mma(Acc<kN>& acc, const MA& a, int m0, const MB& b, int n0) {
  const int lane = threadIdx.x % 32, mat = lane / 8, i = lane % 8;
#pragma unroll
  for (int k0 = 0; k0 < kK; k0 += 16) {
    uint32_t fa[4];
    // ldmatrix x4: lanes 8 mat .. 8 mat + 7 give the rows of matrix `mat`; fragment registers
    // a0..a3 are (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15).
    if constexpr (kA == Stored::kRowMajor) ldsm_x4(fa, a.at(m0 + i + (mat % 2) * 8, k0 + (mat / 2) * 8));
    else ldsm_x4_trans(fa, a.at(k0 + i + (mat / 2) * 8, m0 + (mat % 2) * 8));
#pragma unroll
    for (int n = 0; n < kN; n += 16) {
      uint32_t fb[4];  // (b0, b1) of n-tile n / 8, then of n / 8 + 1
      if constexpr (kB == Stored::kRowMajor) ldsm_x4(fb, b.at(n0 + n + i + (mat / 2) * 8, k0 + (mat % 2) * 8));
      else ldsm_x4_trans(fb, b.at(k0 + i + (mat % 2) * 8, n0 + n + (mat / 2) * 8));
      mma16816<E>(acc.c[n / 8], fa, fb[0], fb[1]);
      mma16816<E>(acc.c[n / 8 + 1], fa, fb[2], fb[3]);
    }
  }
}

// acc (rows m0.., columns n0..) -> m as 16-bit, element pairs as one 4-byte store.
template <class E, int kN, class M>
__device__ __forceinline__ void store(const Acc<kN>& acc, const M& m, int m0, int n0) {
#pragma unroll
  for (int t = 0; t < Acc<kN>::kTiles; ++t)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = pack2<E>(acc.c[t][2 * h], acc.c[t][2 * h + 1]);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(m.at(m0 + Acc<kN>::row(2 * h), n0 + Acc<kN>::col(t, 0))), "r"(v));
    }
}

// Two adjacent 16-bit elements (row r, columns c, c + 1) of m as floats. bf16 widens exactly by
// moving its bits to the top half (one shift or mask each; element access through cutlass::Array
// cost ~8% of the gradient kernel's instructions); fp16 through the paired conversion.
template <class E, class M>
__device__ __forceinline__ float2 load2(const M& m, int r, int c) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(m.at(r, c)));
  if constexpr (std::is_same_v<E, cutlass::bfloat16_t>) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &v, sizeof(h));
    return __half22float2(h);
  }
}

// Sum over the 4 lanes that share an accumulator row (lane / 4).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}
// Sum over the 8 lanes that share accumulator columns (lane % 4).
__device__ __forceinline__ float column_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 4);
  x += __shfl_xor_sync(0xffffffff, x, 8);
  return x + __shfl_xor_sync(0xffffffff, x, 16);
}

}  // namespace attnkit::cuda::gdn::tiles
