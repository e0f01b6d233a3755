// src/cuda/attention/bwd_epilogue.cuh — writing a consumer warpgroup's dK or dV rows (64 keys x D,
// fp32 in registers) when the CTA is done: converted straight into the output (16-byte stores)
// when the CTA holds every query head of its kv head (one, or a packed group), added into the
// fp32 kv-head buffer with vector reductions (GQA, atomic), or stored into the per-query-head fp32
// buffer (GQA, split). Rows past the sequence end are not written.
#pragma once
#include "attnkit/semantics/heads.hpp"
#include "src/cuda/attention/bulk.cuh"  // red_add_v4_f32
#include "src/cuda/attention/bwd_traits.cuh"
#include "src/cuda/attention/fragment.cuh"

namespace attnkit::cuda::attn {

// Row of key `key` of the tile in the fp32 GQA buffers: the token over all sequences.
template <class Tile>
CUTE_DEVICE int64_t dkv_row(const AttnBwdArgs& a, const Tile& tile, int key) {
  return a.cu_seqlens_q ? int64_t(tile.seq.offset_k) + key : int64_t(tile.batch) * a.seqlen_k + key;
}

// GQA, atomic: the fragment added into the kv head's fp32 rows (`head0`: the head's first column
// of row 0; rows `heads` * D floats apart) by one red.v4 per four adjacent columns. In a row, lane
// q of a quad holds the pair (8j + 2q, +1); rows mi and mi + 1 are 8 apart. Lanes q and q ^ 1
// trade a pair so that the even lane holds row mi's columns 8j + 2q .. + 3 and the odd lane row
// mi + 1's 8j + 2q - 2 .. + 1: a quad's four adds fill two 32-byte sectors, and the L2 sees a
// quarter of the scalar atomics' operations.
template <class Traits, class Tile, class TensorA, class TensorC>
CUTE_DEVICE void add_dkv_rows(const AttnBwdArgs& a, const Tile& tile, TensorA const& acc_rc, TensorC const& coord_rc,
                              float* head0, int heads) {
  constexpr int kRows = decltype(size<0>(acc_rc))::value;
  static_assert(kRows % 2 == 0);
  const bool odd = threadIdx.x & 1;
  const int key0 = tile.n_block * Traits::kBlockN;
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; mi += 2) {
    const int key = key0 + get<0>(coord_rc(mi + (odd ? 1 : 0), 0));  // the row this lane adds to
    float* row = head0 + dkv_row(a, tile, key) * heads * Traits::kHeadDim;
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(acc_rc); ni += 2) {
      const float give0 = odd ? acc_rc(mi, ni) : acc_rc(mi + 1, ni);  // the partner's row
      const float give1 = odd ? acc_rc(mi, ni + 1) : acc_rc(mi + 1, ni + 1);
      const float keep0 = odd ? acc_rc(mi + 1, ni) : acc_rc(mi, ni);
      const float keep1 = odd ? acc_rc(mi + 1, ni + 1) : acc_rc(mi, ni + 1);
      const float got0 = __shfl_xor_sync(0xffffffff, give0, 1), got1 = __shfl_xor_sync(0xffffffff, give1, 1);
      const float4 v = odd ? make_float4(got0, got1, keep0, keep1) : make_float4(keep0, keep1, got0, got1);
      const int col = get<1>(coord_rc(mi, ni)) - (odd ? 2 : 0);
      if (key < tile.seq.seqlen_k) red_add_v4_f32(row + col, v);  // (after the shuffles: every lane takes part)
    }
  }
}

// acc_rc / coord_rc: the fragment as (row, col) and each register's (key, d) within the CTA tile.
template <class Traits, class Tile, class TensorA, class TensorC>
CUTE_DEVICE void store_dkv(const AttnBwdArgs& a, const Tile& tile, TensorA const& acc_rc, TensorC const& coord_rc,
                           void* out, const int64_t (&out_stride)[3], float* accum) {
  using Element = typename Traits::Element;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const int head_kv = static_cast<int>(kv_head_of(tile.head, a.heads_q, a.heads_kv));
  const bool direct = a.dkv_in_cta();  // no GQA, or the whole group in this CTA
  const int key0 = tile.n_block * Traits::kBlockN;
  constexpr int kRows = decltype(size<0>(acc_rc))::value;
  if (direct) {  // 16-byte stores (fragment.cuh; dk, dv are checked 16-byte aligned), every row transposed first
    uint32_t words[kRows][kRunsOf<TensorA>][4];
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) quad_transpose_row<Element>(acc_rc, mi, words[mi]);
    CUTE_UNROLL
    for (int mi = 0; mi < kRows; ++mi) {
      const int key = key0 + get<0>(coord_rc(mi, 0));
      if (key >= tile.seq.seqlen_k) continue;
      const int64_t token = int64_t(tile.seq.offset_k) + key;  // row in the packed / per-batch tensor
      store_row_16b(words[mi], coord_rc, mi,
                    static_cast<Element*>(out) + (varlen ? 0 : tile.batch * out_stride[0]) + token * out_stride[1] +
                        head_kv * out_stride[2]);
    }
    return;
  }
  if (!a.split_dkv) {
    add_dkv_rows<Traits>(a, tile, acc_rc, coord_rc, accum + head_kv * Traits::kHeadDim, a.heads_kv);
    return;
  }
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) {
    const int key = key0 + get<0>(coord_rc(mi, 0));
    if (key >= tile.seq.seqlen_k) continue;
    float* row = accum + (dkv_row(a, tile, key) * a.heads_q + tile.head) * Traits::kHeadDim;
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(acc_rc); ni += 2)
      *reinterpret_cast<float2*>(row + get<1>(coord_rc(mi, ni))) = make_float2(acc_rc(mi, ni), acc_rc(mi, ni + 1));
  }
}

}  // namespace attnkit::cuda::attn
