// src/cuda/gdn/chunk_bwd_tiles.cuh — the tiles and warpgroup GEMMs of the chunked backward's
// per-chunk kernels (chunk_bwd_kernel.cuh): 16-bit row-major matrices in swizzled shared memory,
// each read by WGMMA as X (K-major) or X^T (MN-major) over the same bytes, and the fp32
// accumulators of a [64, N] product split between the CTA's two warpgroups by columns.
//
// Warpgroup w computes columns w N / 2 .. of every product (the SM90 accumulator layout: warp
// w % 4 of it holds rows 16 (w % 4) .. + 16). The swizzle atom of a tile is as wide as the column
// half a warpgroup reads of it (64 elements, 128-byte swizzle; or 32, 64-byte), so that half is
// whole atoms, also where it is the contiguous (MN) side of an operand.
#pragma once
#include <cute/tensor.hpp>

#include <type_traits>

#include "src/cuda/attention/mma.cuh"
#include "src/cuda/gdn/chunk_fwd_traits.cuh"

namespace attnkit::cuda::gdn::tiles {

using namespace cute;

// An operand view for cute's SS WGMMA: [kMN, kK] (A: M x K, B: N x K) with `kMajor` contiguous.
template <class E, GMMA::Major kMajor, int kMN, int kK, class Layout>
struct Operand {
  using Element = E;
  static constexpr GMMA::Major kMajorness = kMajor;
  static constexpr int kRowsMN = kMN, kDepth = kK;
  const E* ptr;
  CUTE_HOST_DEVICE auto tensor() const { return make_tensor(make_smem_ptr(ptr), Layout{}); }
};

template <class E, int kAtom>
using AtomK = std::conditional_t<kAtom == 64, GMMA::Layout_K_SW128_Atom<E>, GMMA::Layout_K_SW64_Atom<E>>;
template <class E, int kAtom>
using AtomMN = std::conditional_t<kAtom == 64, GMMA::Layout_MN_SW128_Atom<E>, GMMA::Layout_MN_SW64_Atom<E>>;

// Row-major [kRows, kCols] 16-bit at byte offset `off` of the kernel's shared memory (1024-byte
// aligned): atoms of 8 rows x kAtom columns, the atoms of one column block one after the other.
template <class E, int kRows, int kCols>
struct Tile {
  static constexpr int kAtom = kCols / 2 < 64 ? kCols / 2 : 64;
  static constexpr int kRowBytes = 2 * kAtom;  // between rows r and r + 1 of one column block
  static constexpr int kBytes = kRows * kCols * 2;
  static constexpr int kColumns = kCols;
  static_assert(kAtom == 32 || kAtom == 64, "column halves of 64 or 32 elements");
  static_assert(kRows % 8 == 0 && kCols % kAtom == 0, "whole atoms");
  using KMajor = decltype(tile_to_shape(AtomK<E, kAtom>{}, Shape<Int<kRows>, Int<kCols>>{}));
  using MnMajor = decltype(tile_to_shape(AtomMN<E, kAtom>{}, Shape<Int<kCols>, Int<kRows>>{}, Step<_2, _1>{}));

  uint32_t off;

  // The swizzle of byte offset o from the tile's start: the 16-byte unit index (bits 4..) XOR the
  // row's phase in its atom (bits 7..: 3 of them for 128-byte rows, 2 for 64-byte ones).
  static CUTE_HOST_DEVICE uint32_t swizzle(uint32_t o) {
    constexpr uint32_t kMask = kAtom == 64 ? 7u : 3u;
    return o ^ (((o >> 7) & kMask) << 4);
  }
  // Byte offset of element (r, c) from the tile's start.
  static CUTE_HOST_DEVICE uint32_t offset(int r, int c) {
    return swizzle(uint32_t(((c / kAtom) * kRows + r) * kRowBytes + (c % kAtom) * 2));
  }
  CUTE_DEVICE uint32_t at(int r, int c) const {
    return static_cast<uint32_t>(__cvta_generic_to_shared(gdn_chunk_smem)) + off + offset(r, c);
  }
  // Byte offset of accumulator element i's pair (acc_row, acc_col below) of thread tid, for a
  // [64, kCols] product (a warpgroup's column half is one atom): a per-thread base (its first
  // row, phase and column pair) XOR the compile-time 16-byte unit i / 4, plus 8 rows for the
  // second row half. The base is the same for every tile of the shape, so each access is one XOR
  // and a load with an immediate offset.
  static CUTE_HOST_DEVICE uint32_t frag_base(int tid) {
    const int lane = tid % 32;
    return swizzle(uint32_t(((tid / 128) * kRows + 16 * (tid / 32 % 4) + lane / 4) * kRowBytes + 4 * (lane % 4)));
  }
  static CUTE_HOST_DEVICE uint32_t frag_offset(int tid, int i) {
    return (frag_base(tid) ^ uint32_t((i / 4) << 4)) + uint32_t(i / 2 % 2) * 8u * kRowBytes;
  }
  // The same with the shared base folded into the per-thread base before the XOR (a 1024-byte
  // multiple: the swizzled bits stay), so one XOR serves every tile of the shape.
  CUTE_DEVICE uint32_t frag_at(int i) const {
    const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(gdn_chunk_smem)) + frag_base(threadIdx.x);
    return (base ^ uint32_t((i / 4) << 4)) + off + uint32_t(i / 2 % 2) * 8u * kRowBytes;
  }
  CUTE_DEVICE const E* ptr() const { return reinterpret_cast<const E*>(gdn_chunk_smem + off); }
  // Element (r, c), as the row helpers shared with the forward (chunk_fwd_rows.cuh) address a tile.
  CUTE_DEVICE E& operator()(int r, int c) const { return *reinterpret_cast<E*>(gdn_chunk_smem + off + offset(r, c)); }
  // As [kRows, kCols], K-major (kCols the reduction), and as [kCols, kRows], MN-major.
  CUTE_DEVICE Operand<E, GMMA::Major::K, kRows, kCols, KMajor> k_major() const { return {ptr()}; }
  CUTE_DEVICE Operand<E, GMMA::Major::MN, kCols, kRows, MnMajor> mn_major() const { return {ptr()}; }
};

// The [64, kN] product over the two warpgroups, A [64, kK] and B [kN, kK] from shared memory.
template <class E, int kN, int kK, GMMA::Major kA, GMMA::Major kB, GMMA::ScaleIn kScaleA = GMMA::ScaleIn::One>
using WgMma = decltype(make_tiled_mma(
    GMMA::ss_op_selector<E, E, float, Shape<_64, Int<kN / 2>, Int<kK>>, kA, kB, kScaleA, GMMA::ScaleIn::One>(),
    Layout<Shape<_1, _2, _1>>{}));

// A thread's fp32 share of a [64, kN] accumulator: kN / 4 values, element i at (row(i), col(i)).
template <class E, int kN>
using Acc = decltype(partition_fragment_C(WgMma<E, kN, 16, GMMA::Major::K, GMMA::Major::K>{}, Shape<_64, Int<kN>>{}));

// Accumulator element i of thread tid: the SM90 layout (column pair i % 2, row half i / 2 % 2,
// 8-column group i / 4), warpgroup tid / 128 on the second column half.
CUTE_HOST_DEVICE int acc_row(int tid, int i) { return 16 * (tid / 32 % 4) + tid % 32 / 4 + 8 * (i / 2 % 2); }
template <int kN>
CUTE_HOST_DEVICE int acc_col(int tid, int i) { return tid / 128 * (kN / 2) + 8 * (i / 4) + 2 * (tid % 4) + i % 2; }

// The calling thread's warpgroup (0 or 1) as a value the compiler knows is warp-uniform (a
// shuffle from lane 0): the operands' descriptors depend on it alone and then live in uniform
// registers, built once per warp rather than per thread.
CUTE_DEVICE int uniform_warpgroup() { return __shfl_sync(0xffffffff, int(threadIdx.x) / 128, 0); }

// acc = A B (kZero) or acc += A B, issued and committed as one batch; the caller waits
// (warpgroup_wait) before it touches acc. kScaleA = Neg negates A inside the WGMMA. warpgroup:
// uniform_warpgroup().
template <bool kZero, GMMA::ScaleIn kScaleA = GMMA::ScaleIn::One, class OpA, class OpB, class AccT>
CUTE_DEVICE void gemm(AccT& acc, const OpA& a, const OpB& b, int warpgroup) {
  using E = typename OpA::Element;
  static_assert(OpA::kRowsMN == 64 && OpA::kDepth == OpB::kDepth, "A [64, K], B [N, K]");
  using Mma = WgMma<E, OpB::kRowsMN, OpA::kDepth, OpA::kMajorness, OpB::kMajorness, kScaleA>;
  Mma mma;
  auto thr = mma.get_thread_slice(warpgroup * 128);
  Tensor ta = thr.partition_fragment_A(a.tensor());
  Tensor tb = thr.partition_fragment_B(b.tensor());
  if constexpr (kZero) attn::gemm_zero<false>(mma, ta, tb, acc);
  else attn::gemm_ss(mma, ta, tb, acc);
}

// Two adjacent 16-bit elements (r, c), (r, c + 1) of a tile as floats; bf16 widens exactly by
// moving its bits to the top half.
template <class E>
CUTE_DEVICE float2 widen2(uint32_t v) {
  if constexpr (std::is_same_v<E, cutlass::bfloat16_t>) {
    return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
  } else {
    __half2 h;
    memcpy(&h, &v, sizeof(h));
    return __half22float2(h);
  }
}
// Accumulator element i's pair (i, i + 1) of the tile (a [64, kCols] product's position): raw,
// or as floats.
template <class T>
CUTE_DEVICE uint32_t load_raw2(const T& tile, int i) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(tile.frag_at(i)));
  return v;
}
template <class E, class T>
CUTE_DEVICE float2 load2(const T& tile, int i) {
  return widen2<E>(load_raw2(tile, i));
}

// acc -> tile in 16 bits, f(i, value) applied first; the pairs (i, i + 1) are adjacent columns, one
// 4-byte store. Fenced for the async proxy: the WGMMAs that read the tile come after a barrier.
template <class E, class AccT, class T, class F>
CUTE_DEVICE void store(const AccT& acc, const T& tile, F&& f) {
  static_assert(size(AccT{}) * 256 == 64 * T::kColumns, "the accumulator of a [64, kCols] product");
  CUTE_UNROLL
  for (int i = 0; i < size(acc); i += 2) {
    const uint32_t v = pack2<E>(f(i, acc(i)), f(i + 1, acc(i + 1)));
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(tile.frag_at(i)), "r"(v) : "memory");
  }
  cutlass::arch::fence_view_async_shared();
}

// Sum over the 4 lanes that share an accumulator row (lane / 4).
CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}
// Sum over the 8 lanes of a warp that share accumulator columns (lane % 4).
CUTE_DEVICE float column_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 4);
  x += __shfl_xor_sync(0xffffffff, x, 8);
  return x + __shfl_xor_sync(0xffffffff, x, 16);
}

}  // namespace attnkit::cuda::gdn::tiles
