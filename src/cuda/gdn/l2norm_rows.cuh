// src/cuda/gdn/l2norm_rows.cuh — the op's l2norm of q and k as a pass of its own: qn, kn (16-bit
// [rows, H, D]) and their inverse norms rstd_q, rstd_k (fp32 [rows, H]). The chunked backward runs
// it where bwd_dhu works dv_local out itself (chunk_bwd_dispatch.cu's dhu_local) and the forward
// kept no inverse norms (a forward keeping T keeps them, and the backward normalises on chip:
// ChunkBwdArgs::fold_norms). Without it the dv_local kernel normalises them on the way;
// normalising in bwd_dhu's stage sat on its chain to the state warpgroup and cost more than it saved.
//
// Bits: chunk_fwd_rows.cuh's l2norm_row, two threads a row (the forward's l2_inverse_norm, each
// element times the factor, rounded once), on this pass's own tile layout through SwizzledRows: the
// backward's gradients are the same bits whichever kernel normalised.
#pragma once
#include <cuda_runtime.h>
#include <cute/config.hpp>
#include <cutlass/array.h>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_bwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_rows.cuh"

namespace attnkit::cuda::gdn {

constexpr int kL2NormRowsThreads = 128;  // two a row
constexpr int kL2NormRowsPerCta = kL2NormRowsThreads / 2;

// A row's 16-byte piece j in the CTA's shared tile: the slot within its row, XORed so that both
// ways the tile is read — 8 adjacent lanes on one row's adjacent pieces (the coalesced copies), and
// 8 lanes on 4 rows x 2 halves at the same piece of their half (the sums) — hit 8 different
// 16-byte bank groups.
template <int kPieces>
CUTE_DEVICE int l2norm_slot(int r, int j) {
  static_assert(kPieces == 8 || kPieces == 16, "D = 64 or 128");
  if constexpr (kPieces == 16) return (j & 8) | ((j ^ (2 * r + (j >> 3))) & 7);
  else return j ^ (r & 3);
}

// The tile below seen as l2norm_row's s(row, col): element col of row r (col / 8 its piece).
template <class E, int kPieces>
struct SwizzledRows {
  uint4* tile;
  CUTE_DEVICE E& operator()(int r, int col) const {
    return reinterpret_cast<E*>(&tile[r * kPieces + l2norm_slot<kPieces>(r, col / 8)])[col % 8];
  }
};

// Row m = (b T + t) H + h; blockIdx.y: 0 q, 1 k. A CTA takes 64 rows: copied in by 16-byte pieces
// on adjacent threads (a warp reads 512 contiguous bytes; element by element where the rows are
// not 16-byte aligned), normalised in shared memory by two threads a row, copied out the same way.
// (A thread reading its own half row straight from global memory, a warp touching 32 lines an
// instruction, ran at ~1.9 TB/s: 292 us at B4; this at 128 rows a CTA 182 us, at 64 rows ~10 us
// less: more CTAs an SM overlap their copy-in and copy-out.)
template <class E, int kD>
__global__ void __launch_bounds__(kL2NormRowsThreads, 8) gdn_l2norm_rows_kernel(CUTE_GRID_CONSTANT const L2NormRowsArgs a) {
  using Piece = cutlass::Array<E, 8>;  // 16 bytes
  constexpr int kPieces = kD / 8;      // a row's
  constexpr int kRows = kL2NormRowsPerCta;
  __shared__ uint4 tile[kRows * kPieces];                          // [64 rows, D], l2norm_slot order
  __shared__ int64_t in_at[kRows], out_at[kRows], rstd_at[kRows];  // the rows' element offsets
  const bool is_k = blockIdx.y == 1;
  const RowTensor& x = is_k ? a.k : a.q;
  const RowTensor& y = is_k ? a.kn : a.qn;
  const RowTensor& rs = is_k ? a.rstd_k : a.rstd_q;
  const int64_t m0 = int64_t(blockIdx.x) * kRows;
  const int rows = static_cast<int>(min<int64_t>(kRows, a.B * a.T * a.H - m0));
  const int tid = threadIdx.x;
  if (tid < rows) {
    const int64_t m = m0 + tid, row = m / a.H, b = row / a.T, t = row % a.T;
    const int h = static_cast<int>(m - row * a.H);
    in_at[tid] = b * x.sb + t * x.st + h * x.sh;
    out_at[tid] = b * y.sb + t * y.st + h * y.sh;
    rstd_at[tid] = b * rs.sb + t * rs.st + h * rs.sh;
  }
  __syncthreads();
  // The last CTA's rows past `rows` are zeros: their threads still run the sums below, to meet
  // their partners in l2norm_row's full-warp shuffle.
  for (int p = tid; p < kRows * kPieces; p += kL2NormRowsThreads) {
    const int r = p / kPieces, j = p % kPieces;
    const E* src = static_cast<const E*>(x.ptr) + (r < rows ? in_at[r] : 0) + 8 * j;
    uint4 piece = make_uint4(0, 0, 0, 0);
    if (r < rows && a.vec16) {
      piece = __ldg(reinterpret_cast<const uint4*>(src));
    } else if (r < rows) {
      Piece v;
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = src[e];
      piece = reinterpret_cast<const uint4&>(v);
    }
    tile[r * kPieces + l2norm_slot<kPieces>(r, j)] = piece;
  }
  __syncthreads();
  {
    const int r = tid / 2, part = tid % 2;
    const float inv = l2norm_row<kD, 2>(SwizzledRows<E, kPieces>{tile}, r, part);
    if (part == 0 && r < rows) static_cast<float*>(rs.ptr)[rstd_at[r]] = inv;
  }
  __syncthreads();
  for (int p = tid; p < rows * kPieces; p += kL2NormRowsThreads) {
    const int r = p / kPieces, j = p % kPieces;
    reinterpret_cast<uint4*>(static_cast<E*>(y.ptr) + out_at[r])[j] = tile[r * kPieces + l2norm_slot<kPieces>(r, j)];
  }
}

template <class E, int kD>
cudaError_t launch_gdn_l2norm_rows(const L2NormRowsArgs& a, cudaStream_t stream) {
  const int64_t rows = a.B * a.T * a.H;
  if (rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((rows + kL2NormRowsPerCta - 1) / kL2NormRowsPerCta), 2);
  gdn_l2norm_rows_kernel<E, kD><<<grid, kL2NormRowsThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
