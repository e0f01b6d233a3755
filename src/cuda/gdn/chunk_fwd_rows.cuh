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
    st_shared(dst, v);
  }
}
CUTE_DEVICE void copy4_async(void* dst, const void* src) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
CUTE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
CUTE_DEVICE void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// One thread's share of copying 64-row chunks into swizzled [64, kCols] tiles of layout Tile, by
// kThreads threads (a warpgroup, or half of one; the offsets alone serve tiles of kRows rows too):
// thread tid copies the 16-byte piece tid % (kCols / 8) of rows tid / (kCols / 8) + i * kStep. The
// tile offsets are worked out once (they are the same in every 1024-byte aligned tile of the
// layout, so every stage and every tensor of that shape shares them).
template <int kCols, class Tile, int kRows = 64, int kThreads = 128>
struct ChunkPieces {
  static constexpr int kUnits = kCols / 8, kStep = kThreads / kUnits, kPieces = kRows / kStep;
  int r, c;                  // this thread's first row and its column
  uint32_t offset[kPieces];  // byte offset in a tile of rows r + i * kStep
  template <class Element>
  CUTE_DEVICE ChunkPieces(int tid, const Element* tile0) : r(tid / kUnits), c((tid % kUnits) * 8) {
    Tensor t = make_tensor(make_smem_ptr(tile0), Tile{});
#pragma unroll
    for (int i = 0; i < kPieces; ++i) offset[i] = cute::cast_smem_ptr_to_uint(&t(r + i * kStep, c)) - cute::cast_smem_ptr_to_uint(tile0);
  }

  // Rows of chunk j of one head of x (columns from `base`) into the tile at shared address `tile`.
  // Rows at or past `valid` are zero-filled (and read nothing, though they still pass a valid
  // address: the chunk's first row). x lives in the kernel's parameters: its strides cost no
  // registers.
  template <class Element>
  CUTE_DEVICE void copy(uint32_t tile, const Element* base, const RowTensor& x, const WorkItem& it, int head, int j,
                        int valid, bool vec16) const {
    const Element* chunk = base + it.row(x, int64_t(j) * 64, head) + c;  // row 0: valid in every chunk
    const Element* src = chunk + int64_t(r) * x.st;
#pragma unroll
    for (int i = 0; i < kPieces; ++i, src += int64_t(kStep) * x.st) {
      const bool ok = r + i * kStep < valid;
      copy16(tile + offset[i], ok ? src : chunk, ok, vec16);
    }
  }

  // This thread's pieces of rows at or past `valid` in the tile at shared address `tile` set to
  // zero: what copy() gives those rows, for tiles that came by TMA, whose boxes read on past a
  // sequence's end into the next one's rows (row_tma.cuh). Multiplying them by zero later would
  // not do: 0 * NaN = NaN.
  CUTE_DEVICE void zero_from(uint32_t tile, int valid) const {
#pragma unroll
    for (int i = 0; i < kPieces; ++i)
      if (r + i * kStep >= valid) st_shared(tile + offset[i], make_uint4(0, 0, 0, 0));
  }
};

// The swizzled tile src [64, kCols] -> rows t0 .. t0 + valid - 1 of one head of x (columns from
// base), the mirror of ChunkPieces::copy: 16-byte pieces read from shared memory, written with one
// 16-byte store each (vec16: x's rows are 16-byte aligned) or element by element; kNegate flips
// every element's sign on the way. Called by all 128 threads of a warpgroup.
template <int kCols, bool kNegate = false, class Element, class Src>
CUTE_DEVICE void store_chunk_rows(const Src& src, Element* base, const RowTensor& x, const WorkItem& it, int64_t t0,
                                  int head, int valid, bool vec16) {
  // The thread's (row, piece) addresses are those of an earlier ChunkPieces::copy into this tile:
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
    uint4 piece = ld_shared_v4(&src(r + i * kStep, c));
    if constexpr (kNegate) piece.x ^= 0x80008000u, piece.y ^= 0x80008000u, piece.z ^= 0x80008000u, piece.w ^= 0x80008000u;
    if (vec16) {
      *reinterpret_cast<uint4*>(dst) = piece;
    } else {
      const auto& e = reinterpret_cast<const cutlass::Array<Element, 8>&>(piece);
#pragma unroll
      for (int k = 0; k < 8; ++k) dst[k] = e[k];
    }
  }
}

// What the recurrence keeps for the backward (Recurrence::kOutputAndStates / kStates), from
// 16-bit tiles in shared memory: chunk j - 1's v_new rows (live rows only; sVn [C, BV]) to a.vnew,
// chunk j's start state (sH [DK, BV]) to a.states [slots, HV, DK, V] at the sequence's (with the
// split, the segment's) slot. j = 0: no v_new; j = w.nchunks: no state. T: ChunkFwdTraits; called
// by the 128 threads of one warpgroup (t = its thread index), 16-byte pieces, one in registers at
// a time.
template <class T, class TileVn, class TileH>
CUTE_DEVICE void store_kept(const ChunkFwdArgs& a, const WorkItem& w, int t, const TileVn& sVn, const TileH& sH, int j) {
  using Element = typename T::Element;
  constexpr int kDK = T::kDK, kBV = T::kBV;
  if (j > 0)
    store_chunk_rows<kBV>(sVn, static_cast<Element*>(a.vnew.ptr) + w.vb * kBV, a.vnew, w, int64_t(j - 1) * T::kC, w.hv,
                          w.valid_rows(j - 1), true);
  if (j == w.nchunks) return;
  constexpr int kUnits = kBV / 8, kStep = 128 / kUnits;
  const int r = t / kUnits, c = (t % kUnits) * 8;
  const int64_t V = int64_t(a.v_blocks) * kBV;
  const int64_t chunk = int64_t(w.seg) * a.split.chunks + j;  // in the sequence
  const int64_t first = ChunkSlot::first(a, w);  // from w.t0: no load of cu_seqlens[n] a chunk
  auto* out = static_cast<Element*>(a.states) + ((first + chunk) * a.HV + w.hv) * int64_t(kDK) * V +
              w.vb * kBV + c + r * V;
#pragma unroll 1
  for (int i = 0; i < kDK / kStep; ++i) st_global_v4(out + i * kStep * V, ld_shared_v4(&sH(r + i * kStep, c)));
}

// 1 / sqrt(sum row^2 + eps) of row `row` of the swizzled tile s [*, kCols], by kThreadsPerRow (1 or
// 2, adjacent lanes) threads (`part` = this thread's half). The sum is always taken as (first
// half) + (second half), each half over 4 independent partial sums (no long serial FMA chain), so
// every caller gets a bit-identical factor whichever split it uses.
template <int kCols, int kThreadsPerRow, class Tile>
CUTE_DEVICE float l2_inverse_norm(const Tile& s, int row, int part) {
  using Element = typename std::decay_t<decltype(s(0, 0))>;
  using Piece = cutlass::Array<Element, 8>;  // 16 bytes, contiguous in the swizzled tile
  constexpr int kHalf = kCols / 16;          // pieces per half row
  constexpr int kMine = 2 / kThreadsPerRow;  // halves this thread owns
  float half_sum[kMine];
#pragma unroll
  for (int h = 0; h < kMine; ++h) {
    float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const uint4 raw = ld_shared_v4(&s(row, 8 * ((part * kMine + h) * kHalf + c)));
      const Piece p = reinterpret_cast<const Piece&>(raw);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss[e % 4] = fmaf(float(p[e]), float(p[e]), ss[e % 4]);
    }
    half_sum[h] = (ss[0] + ss[1]) + (ss[2] + ss[3]);
  }
  float total;
  if constexpr (kMine == 2) total = half_sum[0] + half_sum[1];
  else total = half_sum[0] + __shfl_xor_sync(0xffffffff, half_sum[0], 1);  // a + b == b + a exactly
  return rsqrtf(total + static_cast<float>(kL2NormEps));
}

// Row `row` of the swizzled tile s [*, kCols] <- row * l2_inverse_norm(row), in place, by
// kThreadsPerRow threads as above; returns the inverse norm. The row is read twice (sum, then
// scale) rather than held: a few registers instead of kCols / 2.
template <int kCols, int kThreadsPerRow, class Tile>
CUTE_DEVICE float l2norm_row(Tile&& s, int row, int part) {
  using Element = typename std::decay_t<decltype(s(0, 0))>;
  using Piece = cutlass::Array<Element, 8>;
  constexpr int kMine = 2 / kThreadsPerRow;
  constexpr int kHalf = kCols / 16;
  const float inv = l2_inverse_norm<kCols, kThreadsPerRow>(s, row, part);
#pragma unroll
  for (int c = 0; c < kMine * kHalf; ++c) {
    const uint4 raw = ld_shared_v4(&s(row, 8 * (part * kMine * kHalf + c)));
    Piece p = reinterpret_cast<const Piece&>(raw);
#pragma unroll
    for (int e = 0; e < 8; ++e) p[e] = Element(float(p[e]) * inv);
    st_shared(&s(row, 8 * (part * kMine * kHalf + c)), reinterpret_cast<const uint4&>(p));
  }
  return inv;
}

}  // namespace attnkit::cuda::gdn
