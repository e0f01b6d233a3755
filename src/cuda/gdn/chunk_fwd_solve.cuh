// src/cuda/gdn/chunk_fwd_solve.cuh — T0 = (I + L)^-1 for one chunk's strictly lower triangular
// L [64, 64] in fp32 (spec/gdn.md step 3), by one warpgroup, in shared memory.
//
// Blocked by 16 (block indices 0..3):
//   1. each warp inverts one diagonal block by forward substitution (lane c owns column c), fp32;
//   2. the two 32 x 32 diagonal halves: T_10 = -T_11 L_10 T_00 and T_32 = -T_33 L_32 T_22;
//   3. the lower-left half: T_BA = -T_B (L_BA T_A), one 16 x 16 block per warp.
// Steps 2 and 3 are 16 x 16 x 16 products on the tensor cores (mma.sync m16n8k8, TF32 operands
// rounded to nearest, fp32 accumulation): a product there costs ~40 instructions a lane instead
// of ~180 FFMA / LDS. TF32's 2^-11 relative rounding sits well under the bf16 rounding (2^-8)
// that T0 gets anyway as a GEMM operand afterwards.
#pragma once
#include <cuda_runtime.h>

namespace attnkit::cuda::gdn {

// Row strides (floats) of the fp32 buffers: T's [64][kLdT] and the scratch blocks' [16][kLdZ].
// Padded so that the mma fragments' loads hit distinct banks (A: rows 4 banks apart) or at most
// two ways (B, and the scratch blocks).
constexpr int kLdT = 68;
constexpr int kLdZ = 20;
constexpr int kSolveScratchFloats = 4 * 16 * kLdZ;  // four 16 x 16 blocks

// A warp's 16 x 16 fp32 block in mma.sync m16n8k8's C layout, two 8-column tiles: lane (g, t) =
// (lane / 4, lane % 4) holds rows g and g + 8, columns 2t and 2t + 1 of each tile.
struct Tf32Block16 {
  float acc[2][4];
  __device__ void zero() {
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
  }
  static __device__ uint32_t tf32(float x) {
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(y) : "f"(x));
    return y;
  }
  // acc += A B for 16 x 16 blocks of row-major fp32 matrices (row strides lda, ldb).
  __device__ void mac(const float* A, int lda, const float* B, int ldb, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int k = 0; k < 16; k += 8) {
      const uint32_t a0 = tf32(A[g * lda + k + t]), a1 = tf32(A[(g + 8) * lda + k + t]);
      const uint32_t a2 = tf32(A[g * lda + k + t + 4]), a3 = tf32(A[(g + 8) * lda + k + t + 4]);
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        const uint32_t b0 = tf32(B[(k + t) * ldb + 8 * n + g]), b1 = tf32(B[(k + t + 4) * ldb + 8 * n + g]);
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(acc[n][0]), "+f"(acc[n][1]), "+f"(acc[n][2]), "+f"(acc[n][3])
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
      }
    }
  }
  __device__ void store(float* C, int ldc, int lane, float sign) const {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      *reinterpret_cast<float2*>(&C[g * ldc + 8 * n + 2 * t]) = make_float2(sign * acc[n][0], sign * acc[n][1]);
      *reinterpret_cast<float2*>(&C[(g + 8) * ldc + 8 * n + 2 * t]) = make_float2(sign * acc[n][2], sign * acc[n][3]);
    }
  }
};

// sT: fp32 [64][kLdT] holding L (zero on and above the diagonal); on return, T0 (zero above the
// diagonal). scratch: fp32 [4][16][kLdZ]. Called by all 128 threads of the warpgroup; wg_sync is
// its barrier (also the last thing done).
template <class Sync>
__device__ void invert_unit_lower_64(float* sT, float* scratch, Sync wg_sync) {
  constexpr int ld = kLdT;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  auto blk = [&](int i, int j) { return sT + (16 * i) * ld + 16 * j; };
  auto zblk = [&](int b) { return scratch + b * 16 * kLdZ; };
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
    Tf32Block16 z;
    z.zero();
    z.mac(blk(i, j), ld, blk(j, j), ld, lane);  // Z = L_ij T_jj
    z.store(zblk(warp), kLdZ, lane, 1.f);
    __syncwarp();
    Tf32Block16 y;
    y.zero();
    y.mac(blk(i, i), ld, zblk(warp), kLdZ, lane);  // T_ij = -T_ii Z
    y.store(blk(i, j), ld, lane, -1.f);
  }
  wg_sync();
  // 3. warp w -> block (I, J) = (2 + w / 2, w % 2) of T_BA.
  const int I = 2 + warp / 2, J = warp % 2;
  {
    Tf32Block16 z;  // Z_IJ = sum_{k = J..1} L_Ik T_kJ
    z.zero();
    for (int k = J; k < 2; ++k) z.mac(blk(I, k), ld, blk(k, J), ld, lane);
    z.store(zblk(warp), kLdZ, lane, 1.f);
  }
  wg_sync();  // every Z is there, and every read of L_BA is done
  {
    Tf32Block16 y;  // T_IJ = -sum_{m = 2..I} T_Im Z_mJ, with Z_mJ in scratch block 2 (m - 2) + J
    y.zero();
    for (int m = 2; m <= I; ++m) y.mac(blk(I, m), ld, zblk(2 * (m - 2) + J), kLdZ, lane);
    y.store(blk(I, J), ld, lane, -1.f);
  }
  wg_sync();
}

}  // namespace attnkit::cuda::gdn
