// src/cuda/attention/fwd_epilogue.cuh — writes a consumer thread's rows of O (normalised, converted
// to the element type) and LSE straight from registers. A thread holds 2 rows and pairs of
// adjacent columns, so O goes out as 4-byte stores; rows past the sequence end are not written.
#pragma once
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/fwd_traits.cuh"

namespace attnkit::cuda::attn {

template <class Traits, class Tile, class TensorO, class TensorC, int kRows>
CUTE_DEVICE void store_output(const AttnFwdArgs& a, const Tile& tile, TensorO const& o_rc, TensorC const& coord_rc,
                              const float (&lse)[kRows]) {
  using Element = typename Traits::Element;
  const bool varlen = a.cu_seqlens_q != nullptr;
  Element* out = static_cast<Element*>(a.out) + (varlen ? 0 : tile.batch * a.o_stride[0]) +
                 static_cast<int64_t>(tile.seq.offset_q) * a.o_stride[1] + tile.head * a.o_stride[2];
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(o_rc); ++mi) {
    const int row = tile.m_block * Traits::kBlockM + get<0>(coord_rc(mi, 0));
    if (row >= tile.seq.seqlen_q) continue;
    Element* orow = out + static_cast<int64_t>(row) * a.o_stride[1];
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(o_rc); ni += 2) {  // columns (c, c + 1) are adjacent registers
      const int col = get<1>(coord_rc(mi, ni));
      cutlass::Array<Element, 2> pair;
      pair[0] = o_rc(mi, ni);
      pair[1] = o_rc(mi, ni + 1);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(orow + col) = pair;
    }
    if (a.lse && get<1>(coord_rc(mi, 0)) == 0) {  // one thread of the quad owns the row's LSE
      const int64_t off = (varlen ? 0 : tile.batch * a.lse_stride[0]) + tile.head * a.lse_stride[1] +
                          static_cast<int64_t>(tile.seq.offset_q + row) * a.lse_stride[2];
      a.lse[off] = lse[mi];
    }
  }
}

}  // namespace attnkit::cuda::attn
