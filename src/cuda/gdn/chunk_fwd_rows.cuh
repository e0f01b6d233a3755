// src/cuda/gdn/chunk_fwd_rows.cuh — moving one chunk's rows into shared memory, and the in-op
// l2norm of rows in place; shared by the two chunked-forward kernels.
#pragma once
#include <cute/tensor.hpp>

#include "attnkit/semantics/numerics.hpp"
#include "src/cuda/gdn/chunk_fwd_args.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn {

// 16 bytes from global memory to shared address dst: cp.async (zero-filled when !valid), or
// element by element when the rows are not 16-byte aligned.
template <class Element>
CUTE_DEVICE void copy16(uint32_t dst, const Element* src, bool valid, bool vec16) {
  if (vec16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
  } else {
    cutlass::Array<Element, 8> piece;
#pragma unroll
    for (int e = 0; e < 8; ++e) piece[e] = valid ? src[e] : Element(0.f);
    const uint4 v = reinterpret_cast<const uint4&>(piece);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
  }
}
CUTE_DEVICE void copy4_async(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
CUTE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
CUTE_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// One thread's share of copying chunks of one head of x (columns from `base`) into swizzled
// [64, kCols] tiles of layout Tile, by the 128 threads of a warpgroup: thread tid copies 16-byte
// piece tid % (kCols / 8) of rows tid / (kCols / 8) + i * kStep. Everything but the chunk index is
// worked out once (the tile offsets are the same in every stage), so a chunk costs a handful of
// instructions per piece. Rows at or past `valid` are zero-filled (and read nothing, though they
// still pass a valid address: the chunk's first row).
template <int kCols, class Element, class Tile>
struct ChunkRowCopier {
  static constexpr int kUnits = kCols / 8, kStep = 128 / kUnits, kPieces = 64 / kStep;
  const Element* first;   // this thread's piece of row 0 of chunk 0
  int64_t row0;           // r rows
  int64_t row_step;       // kStep rows
  int64_t chunk_step;     // 64 rows
  int r;                  // this thread's first row in a chunk
  uint32_t offset[kPieces];  // byte offset in the tile of rows r + i * kStep

  CUTE_DEVICE ChunkRowCopier(const Element* base, const RowTensor& x, const WorkItem& it, int head, int tid)
      : r(tid / kUnits) {
    const int c = (tid % kUnits) * 8;
    first = base + it.row(x, 0, head) + c;
    row0 = int64_t(r) * x.st;
    row_step = int64_t(kStep) * x.st;
    chunk_step = 64 * x.st;
#pragma unroll
    for (int i = 0; i < kPieces; ++i) offset[i] = static_cast<uint32_t>(Tile{}(r + i * kStep, c) * sizeof(Element));
  }
  // Chunk j into the tile at shared address `tile`.
  CUTE_DEVICE void copy(uint32_t tile, int j, int valid, bool vec16) const {
    const Element* chunk = first + j * chunk_step;  // row 0: valid in every chunk
    const Element* src = chunk + row0;
#pragma unroll
    for (int i = 0; i < kPieces; ++i, src += row_step) {
      const bool ok = r + i * kStep < valid;
      copy16(tile + offset[i], ok ? src : chunk, ok, vec16);
    }
  }
};

// The swizzled tile src [64, kCols] -> rows t0 .. t0 + valid - 1 of one head of x (columns from
// base), the mirror of ChunkRowCopier: 16-byte pieces read from shared memory, written with one
// 16-byte store each (vec16: x's rows are 16-byte aligned) or element by element. Called by all
// 128 threads of a warpgroup.
template <int kCols, class Element, class Src>
CUTE_DEVICE void store_chunk_rows(const Src& src, Element* base, const RowTensor& x, const WorkItem& it, int64_t t0,
                                  int head, int valid, bool vec16) {
  // The thread's (row, piece) addresses are those of an earlier ChunkRowCopier into this tile:
  // worked out afresh here rather than kept in registers from there (or spilled) meanwhile.
  int tid = threadIdx.x % 128;
  asm volatile("" : "+r"(tid));
  constexpr int kUnits = kCols / 8, kStep = 128 / kUnits;
  const int c = (tid % kUnits) * 8, r = tid / kUnits;
  const int64_t step = int64_t(kStep) * x.st;
  Element* dst = base + it.row(x, t0, head) + c + int64_t(r) * x.st;
#pragma unroll
  for (int i = 0; i < 64 / kStep; ++i, dst += step) {
    if (r + i * kStep >= valid) break;
    const uint4 piece = ld_shared_v4(&src(r + i * kStep, c));
    if (vec16) {
      *reinterpret_cast<uint4*>(dst) = piece;
    } else {
      const auto& e = reinterpret_cast<const cutlass::Array<Element, 8>&>(piece);
#pragma unroll
      for (int k = 0; k < 8; ++k) dst[k] = e[k];
    }
  }
}

// Row `row` of the swizzled tile s [*, kCols] <- row / sqrt(sum row^2 + eps), in place, by
// kThreadsPerRow (1 or 2, adjacent lanes) threads. The sum is always taken as (first half) +
// (second half), each half over 4 independent partial sums (no long serial FMA chain), so both
// kernels see bit-identical rows whichever split they use.
template <int kCols, int kThreadsPerRow, class Tile>
CUTE_DEVICE void l2norm_row(Tile&& s, int row, int part) {
  using Element = typename std::decay_t<decltype(s(0, 0))>;
  using Piece = cutlass::Array<Element, 8>;  // 16 bytes, contiguous in the swizzled tile
  constexpr int kHalf = kCols / 16;          // pieces per half row
  constexpr int kMine = 2 / kThreadsPerRow;  // halves this thread owns
  Piece x[kMine * kHalf];
  float half_sum[kMine];
#pragma unroll
  for (int h = 0; h < kMine; ++h) {
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      Piece& p = x[h * kHalf + c];
      const uint4 raw = ld_shared_v4(&s(row, 8 * ((part * kMine + h) * kHalf + c)));
      p = reinterpret_cast<const Piece&>(raw);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[e % 4] = fmaf(float(p[e]), float(p[e]), ss[e % 4]);
    }
    half_sum[h] = (ss[0] + ss[1]) + (ss[2] + ss[3]);
  }
  float total;
  if constexpr (kMine == 2) total = half_sum[0] + half_sum[1];
  else total = half_sum[0] + __shfl_xor_sync(0xffffffff, half_sum[0], 1);  // a + b == b + a exactly
  const float inv = rsqrtf(total + static_cast<float>(kL2NormEps));
#pragma unroll
  for (int c = 0; c < kMine * kHalf; ++c) {
#pragma unroll
    for (int e = 0; e < 8; ++e) x[c][e] = Element(float(x[c][e]) * inv);
    st_shared(&s(row, 8 * (part * kMine * kHalf + c)), reinterpret_cast<const uint4&>(x[c]));
  }
}

}  // namespace attnkit::cuda::gdn
