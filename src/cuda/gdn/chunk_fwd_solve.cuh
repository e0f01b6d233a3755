// src/cuda/gdn/chunk_fwd_solve.cuh — T0 = (I + L)^-1 for one chunk's strictly lower triangular
// L [64, 64] in fp32 (spec/gdn.md step 3), by one warpgroup, in shared memory.
//
// Blocked by 16 (block indices 0..3):
//   1. each warp inverts one diagonal block by forward substitution (lane c owns column c);
//   2. the two 32 x 32 diagonal halves: T_10 = -T_11 L_10 T_00 and T_32 = -T_33 L_32 T_22;
//   3. the lower-left half: T_BA = -T_B (L_BA T_A), one 16 x 16 block per warp.
// fp32 throughout (the result is rounded to 16 bits only as a GEMM operand afterwards).
#pragma once
#include <cuda_runtime.h>

namespace attnkit::cuda::gdn {

// A warp's share of a 16 x 16 block: lane -> column lane % 16, rows 8 * (lane / 16) + 0..7.
struct Block16 {
  float acc[8];
  __device__ void zero() {
#pragma unroll
    for (int r = 0; r < 8; ++r) acc[r] = 0.f;
  }
  // acc += A B for 16 x 16 blocks of row-major fp32 matrices (A rows 16-byte aligned).
  __device__ void mac(const float* A, int lda, const float* B, int ldb, int lane) {
    const int c = lane % 16, r0 = (lane / 16) * 8;
#pragma unroll
    for (int k = 0; k < 16; k += 4) {
      float b[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = B[(k + j) * ldb + c];
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const float4 a = *reinterpret_cast<const float4*>(A + (r0 + r) * lda + k);
        acc[r] = fmaf(a.x, b[0], fmaf(a.y, b[1], fmaf(a.z, b[2], fmaf(a.w, b[3], acc[r]))));
      }
    }
  }
  __device__ void store(float* C, int ldc, int lane, float sign) const {
    const int c = lane % 16, r0 = (lane / 16) * 8;
#pragma unroll
    for (int r = 0; r < 8; ++r) C[(r0 + r) * ldc + c] = sign * acc[r];
  }
};

// sT: fp32 [64][64] row-major holding L (zero on and above the diagonal); on return, T0 (zero
// above the diagonal). scratch: fp32 [4][16][16]. Called by all 128 threads of the warpgroup;
// wg_sync is its barrier (also the last thing done).
template <class Sync>
__device__ void invert_unit_lower_64(float* sT, float* scratch, Sync wg_sync) {
  constexpr int ld = 64;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  auto blk = [&](int i, int j) { return sT + (16 * i) * ld + 16 * j; };
  {  // 1. x = column c of T_dd: x_i = [i == c] - sum_{k<i} L_ik x_k
    const int c = lane % 16;
    const float* L = blk(warp, warp);
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      float s = i == c ? 1.f : 0.f;
#pragma unroll
      for (int k = 0; k < i; ++k) s = fmaf(-L[i * ld + k], x[k], s);
      x[i] = s;
    }
    __syncwarp();
    if (lane < 16) {
      float* T = blk(warp, warp);
#pragma unroll
      for (int i = 0; i < 16; ++i) T[i * ld + c] = x[i];
    }
  }
  wg_sync();
  if (warp < 2) {  // 2. warp 0: T_10, warp 1: T_32
    const int i = 2 * warp + 1, j = 2 * warp;
    float* Z = scratch + warp * 256;
    Block16 z;
    z.zero();
    z.mac(blk(i, j), ld, blk(j, j), ld, lane);  // Z = L_ij T_jj
    z.store(Z, 16, lane, 1.f);
    __syncwarp();
    Block16 y;
    y.zero();
    y.mac(blk(i, i), ld, Z, 16, lane);  // T_ij = -T_ii Z
    y.store(blk(i, j), ld, lane, -1.f);
  }
  wg_sync();
  // 3. warp w -> block (I, J) = (2 + w / 2, w % 2) of T_BA.
  const int I = 2 + warp / 2, J = warp % 2;
  {
    Block16 z;  // Z_IJ = sum_{k = J..1} L_Ik T_kJ
    z.zero();
    for (int k = J; k < 2; ++k) z.mac(blk(I, k), ld, blk(k, J), ld, lane);
    z.store(scratch + warp * 256, 16, lane, 1.f);
  }
  wg_sync();  // every Z is there, and every read of L_BA is done
  {
    Block16 y;  // T_IJ = -sum_{m = 2..I} T_Im Z_mJ, with Z_mJ in scratch block 2 (m - 2) + J
    y.zero();
    for (int m = 2; m <= I; ++m) y.mac(blk(I, m), ld, scratch + (2 * (m - 2) + J) * 256, 16, lane);
    y.store(blk(I, J), ld, lane, -1.f);
  }
  wg_sync();
}

}  // namespace attnkit::cuda::gdn
