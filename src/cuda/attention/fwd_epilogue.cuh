// src/cuda/attention/fwd_epilogue.cuh — writes a consumer thread's rows of O (normalised, converted
// to the element type) and LSE straight from registers. A thread holds 2 rows and, in each row,
// column pairs of every 8-column group; the four threads of a quad trade pairs so that each writes
// whole groups as 16-byte stores. Rows past the sequence end are not written.
#pragma once
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/fwd_traits.cuh"

namespace attnkit::cuda::attn {

// O's rows go out as 16-byte stores (store_row_16b, fragment.cuh). `out` is 16-byte aligned with
// 16-byte row strides (tma_checks.hpp, checked for every CUDA forward).
template <class Traits, class Tile, class TensorO, class TensorC, int kRows>
CUTE_DEVICE void store_output(const AttnFwdArgs& a, const Tile& tile, TensorO const& o_rc, TensorC const& coord_rc,
                              const float (&lse)[kRows]) {
  using Element = typename Traits::Element;
  const bool varlen = a.cu_seqlens_q != nullptr;
  Element* out = static_cast<Element*>(a.out) + (varlen ? 0 : tile.batch * a.o_stride[0]) +
                 static_cast<int64_t>(tile.seq.offset_q) * a.o_stride[1] + tile.head * a.o_stride[2];
  uint32_t words[kRows][kRunsOf<TensorO>][4];  // every row transposed before the first store
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) quad_transpose_row<Element>(o_rc, mi, words[mi]);
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) {
    const int row = tile.m_block * Traits::kBlockM + get<0>(coord_rc(mi, 0));
    if (row >= tile.seq.seqlen_q) continue;
    store_row_16b(words[mi], coord_rc, mi, out + static_cast<int64_t>(row) * a.o_stride[1]);
    if (a.lse && threadIdx.x % 4 == 0) {  // one thread of the quad owns the row's LSE
      const int64_t off = (varlen ? 0 : tile.batch * a.lse_stride[0]) + tile.head * a.lse_stride[1] +
                          static_cast<int64_t>(tile.seq.offset_q + row) * a.lse_stride[2];
      a.lse[off] = lse[mi];
    }
  }
}

}  // namespace attnkit::cuda::attn
