// src/cuda/attention/fwd_epilogue.cuh — writes a consumer thread's rows of O (normalised, converted
// to the element type) and LSE straight from registers. A thread holds 2 rows and, in each row,
// column pairs of every 8-column group; the four threads of a quad trade pairs so that each writes
// whole groups as 16-byte stores. Rows past the sequence end are not written.
#pragma once
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/fwd_traits.cuh"

namespace attnkit::cuda::attn {

// A 4 x 4 transpose of 32-bit values across the four lanes of a quad, in two exchange stages:
// lane q holds m[c] = M[q][c] on entry and m[r] = M[r][q] on return. All 32 lanes must call it.
CUTE_DEVICE void quad_transpose(uint32_t (&m)[4]) {
  const bool b0 = threadIdx.x & 1, b1 = threadIdx.x & 2;  // the lane's bits within its quad
  // With lane q ^ 1: keep the columns c with c % 2 == q % 2, trade the others. Then u0, u1 are
  // rows (q & 2) + 0, + 1 of column q % 2, and u2, u3 the same rows of column 2 + q % 2.
  const uint32_t r0 = __shfl_xor_sync(0xffffffff, b0 ? m[0] : m[1], 1);
  const uint32_t r1 = __shfl_xor_sync(0xffffffff, b0 ? m[2] : m[3], 1);
  const uint32_t own0 = b0 ? m[1] : m[0], own1 = b0 ? m[3] : m[2];
  const uint32_t u0 = b0 ? r0 : own0, u1 = b0 ? own0 : r0, u2 = b0 ? r1 : own1, u3 = b0 ? own1 : r1;
  // With lane q ^ 2: keep column q (2 (q / 2) + q % 2), trade the other.
  const uint32_t s0 = __shfl_xor_sync(0xffffffff, b1 ? u0 : u2, 2);
  const uint32_t s1 = __shfl_xor_sync(0xffffffff, b1 ? u1 : u3, 2);
  const uint32_t k0 = b1 ? u2 : u0, k1 = b1 ? u3 : u1;  // rows 2 (q / 2) + 0, + 1
  m[0] = b1 ? s0 : k0;
  m[1] = b1 ? s1 : k1;
  m[2] = b1 ? k0 : s0;
  m[3] = b1 ? k1 : s1;
}

// O's rows go out as 16-byte stores: in a row, lane q of a quad holds the pair (8j + 2q, +1) of
// every 8-column group j (register pairs ni = 2j, 2j + 1); for each run of four groups the quad
// transposes, so lane q writes group 4g + q whole. A warp's stores then fill their 32-byte
// sectors: 4-byte pair stores left every sector half used (ncu, docs/perf/flex_fwd.md). `out` is
// 16-byte aligned with 16-byte row strides (tma_checks.hpp, checked for every CUDA forward).
template <class Traits, class Tile, class TensorO, class TensorC, int kRows>
CUTE_DEVICE void store_output(const AttnFwdArgs& a, const Tile& tile, TensorO const& o_rc, TensorC const& coord_rc,
                              const float (&lse)[kRows]) {
  using Element = typename Traits::Element;
  constexpr int kPairs = decltype(size<1>(o_rc))::value / 2;  // 8-column groups in a row
  static_assert(kPairs % 4 == 0);
  const int q = threadIdx.x % 4;
  const bool varlen = a.cu_seqlens_q != nullptr;
  Element* out = static_cast<Element*>(a.out) + (varlen ? 0 : tile.batch * a.o_stride[0]) +
                 static_cast<int64_t>(tile.seq.offset_q) * a.o_stride[1] + tile.head * a.o_stride[2];
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(o_rc); ++mi) {
    const int row = tile.m_block * Traits::kBlockM + get<0>(coord_rc(mi, 0));
    const bool in_sequence = row < tile.seq.seqlen_q;  // the quad's shuffles run either way
    Element* orow = out + static_cast<int64_t>(row) * a.o_stride[1];
    CUTE_UNROLL
    for (int g = 0; g < kPairs / 4; ++g) {
      uint32_t m[4];  // the pairs of groups 4g .. 4g + 3, then group 4g + q whole
      CUTE_UNROLL
      for (int c = 0; c < 4; ++c) {
        cutlass::Array<Element, 2> pair;
        pair[0] = o_rc(mi, 8 * g + 2 * c);
        pair[1] = o_rc(mi, 8 * g + 2 * c + 1);
        m[c] = reinterpret_cast<const uint32_t&>(pair);
      }
      quad_transpose(m);
      const int col = get<1>(coord_rc(mi, 8 * g)) - 2 * q + 8 * q;  // first column of group 4g + q
      if (in_sequence) *reinterpret_cast<uint4*>(orow + col) = make_uint4(m[0], m[1], m[2], m[3]);
    }
    if (in_sequence && a.lse && q == 0) {  // one thread of the quad owns the row's LSE
      const int64_t off = (varlen ? 0 : tile.batch * a.lse_stride[0]) + tile.head * a.lse_stride[1] +
                          static_cast<int64_t>(tile.seq.offset_q + row) * a.lse_stride[2];
      a.lse[off] = lse[mi];
    }
  }
}

}  // namespace attnkit::cuda::attn
