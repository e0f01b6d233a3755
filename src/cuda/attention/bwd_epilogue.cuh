// src/cuda/attention/bwd_epilogue.cuh — writing a consumer warpgroup's dK or dV rows (64 keys x D,
// fp32 in registers) when the CTA is done: converted straight into the output (16-byte stores)
// when there is one query head per kv head, added into the fp32 kv-head buffer with atomics (GQA,
// atomic), or stored into the per-query-head fp32 buffer (GQA, split). Rows past the sequence end
// are not written.
#pragma once
#include "attnkit/semantics/heads.hpp"
#include "src/cuda/attention/bwd_traits.cuh"
#include "src/cuda/attention/fragment.cuh"

namespace attnkit::cuda::attn {

// acc_rc / coord_rc: the fragment as (row, col) and each register's (key, d) within the CTA tile.
template <class Traits, class Tile, class TensorA, class TensorC>
CUTE_DEVICE void store_dkv(const AttnBwdArgs& a, const Tile& tile, TensorA const& acc_rc, TensorC const& coord_rc,
                           void* out, const int64_t (&out_stride)[3], float* accum) {
  using Element = typename Traits::Element;
  const bool varlen = a.cu_seqlens_q != nullptr;
  const int head_kv = static_cast<int>(kv_head_of(tile.head, a.heads_q, a.heads_kv));
  const bool direct = a.heads_q == a.heads_kv;
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
  CUTE_UNROLL
  for (int mi = 0; mi < kRows; ++mi) {
    const int key = key0 + get<0>(coord_rc(mi, 0));
    if (key >= tile.seq.seqlen_k) continue;
    const int64_t token = int64_t(tile.seq.offset_k) + key;  // row in the packed / per-batch tensor
    const int64_t row_k = varlen ? token : int64_t(tile.batch) * a.seqlen_k + key;
    float* row = a.split_dkv ? accum + (row_k * a.heads_q + tile.head) * Traits::kHeadDim
                             : accum + (row_k * a.heads_kv + head_kv) * Traits::kHeadDim;
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(acc_rc); ni += 2) {
      float* p = row + get<1>(coord_rc(mi, ni));
      if (a.split_dkv) {
        *reinterpret_cast<float2*>(p) = make_float2(acc_rc(mi, ni), acc_rc(mi, ni + 1));
      } else {
        atomicAdd(p, acc_rc(mi, ni));
        atomicAdd(p + 1, acc_rc(mi, ni + 1));
      }
    }
  }
}

}  // namespace attnkit::cuda::attn
