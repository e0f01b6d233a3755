// src/cuda/attention/fwd_variant.cuh — what varies between the kernels built on the forward
// mainloop: which key tiles a query tile visits and what happens to a tile of scores before the
// online softmax. A Variant names four things:
//   Args                 extra kernel parameters beside AttnFwdArgs (FwdParams::extra); an
//                        `int num_splits` member splits each query tile's key tiles over that
//                        many tiles of work (num_splits_of)
//   Tile<Traits>         built from (args, extra, tile index): m_block, head, batch, seq, skip(),
//                        num_key_tiles(), key_tile(i) — the i-th key tile in visiting order
//   Scores<Traits>       built per tile by a consumer warpgroup (with Traits::kScratchFloats of
//                        shared memory of its own): scale_log2(), lse_scale(), and
//                        apply(s_rc, coord_rc, i, n) on the fp32 scores of visited key tile n
//   Epilogue<Traits>     store(a, extra, tile, o_rc, coord_rc, lse): a consumer thread's rows of
//                        the normalised fp32 output and their LSE
//   set_tile_order(a, extra)  the order in which the Tile decodes tile indices (launch_order.hpp):
//                        AttnFwdArgs::heads_per_group_log2 / tail_m_blocks, set by launch_fwd
// This file holds the softmax attention variant (mask rule, softcap); flex attention's is in
// src/cuda/flex/fwd_variant.cuh.
#pragma once
#include <cmath>
#include <type_traits>
#include <utility>

#include "src/cuda/attention/fwd_epilogue.cuh"
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/softmax.cuh"

namespace attnkit::cuda::attn {

// Tiles of work per query tile: Args::num_splits where the variant has it, else 1.
template <class Args, class = void>
struct HasNumSplits : std::false_type {};
template <class Args>
struct HasNumSplits<Args, std::void_t<decltype(std::declval<const Args&>().num_splits)>> : std::true_type {};
template <class Args>
CUTE_HOST_DEVICE int num_splits_of(const Args& x) {
  if constexpr (HasNumSplits<Args>::value) return x.num_splits;
  else return 1;
}

// Whether a variant's Tile is shared from producer to consumers through shared memory: it names
// its plain part Tile::Shared, and the consumers rebuild it as Tile(shared, extra) (a Tile that
// refers to the kernel parameters binds them again; a copied pointer would turn constant-bank
// reads into generic loads).
template <class Tile, class = void>
inline constexpr bool shares_description_v = false;
template <class Tile>
inline constexpr bool shares_description_v<Tile, std::void_t<typename Tile::Shared>> = true;

// The output in the element type, as the caller's out / lse tensors hold it.
template <class Traits>
struct OutputEpilogue {
  template <class Extra, class Tile, class TensorO, class TensorC, int kRows>
  CUTE_DEVICE static void store(const AttnFwdArgs& a, const Extra&, const Tile& tile, TensorO const& o_rc,
                                TensorC const& coord_rc, const float (&lse)[kRows]) {
    Tensor o_out = make_tensor<typename Traits::Element>(o_rc.layout());
    convert_into(o_rc, o_out);
    store_output<Traits>(a, tile, o_out, coord_rc, lse);
  }
};

template <class Traits>
struct DenseScores {
  const AttnFwdArgs& a;
  const TileInfo<Traits>& tile;
  bool softcap;
  float softcap_in;  // scale / softcap: tanh's argument per unit of q.k
  int wg_row_first, wg_row_last;  // this warpgroup's 64 query rows of the tile

  template <class Extra>
  CUTE_DEVICE DenseScores(const AttnFwdArgs& a_, const Extra&, const TileInfo<Traits>& tile_, int wg, float* /*scratch*/)
      : a(a_),
        tile(tile_),
        softcap(a_.softcap > 0.f),
        softcap_in(a_.softcap > 0.f ? a_.scale / a_.softcap : 0.f),
        wg_row_first(tile_.m_block * Traits::kBlockM + wg * 64),
        wg_row_last(tile_.m_block * Traits::kBlockM + wg * 64 + 63) {}

  // Scores stay in q.k units, the scale folding into the exponent; after a softcap they are
  // tanh(scale q.k / cap), in units of the cap, which folds into the exponent instead.
  CUTE_DEVICE float scale_log2() const { return lse_scale() * float(M_LOG2E); }
  CUTE_DEVICE float lse_scale() const { return softcap ? a.softcap : a.scale; }

  // A key tile needs per-element masking unless all of it is visible to all 64 rows of this
  // warpgroup (the common case away from the diagonal and the sequence end).
  CUTE_DEVICE bool needs_mask(int n) const {
    const int c0 = n * Traits::kBlockN, c1 = c0 + Traits::kBlockN - 1;
    return c1 >= tile.seq.seqlen_k || tile.rule.lo(wg_row_last) > c0 || tile.rule.hi(wg_row_first) < c1;
  }

  template <class TensorS, class TensorC>
  CUTE_DEVICE void apply(TensorS& s_rc, TensorC const& coord_rc, int /*i*/, int n) const {
    if (softcap) apply_softcap(s_rc, softcap_in);
    if (needs_mask(n)) apply_mask(s_rc, coord_rc, tile.rule, tile.m_block * Traits::kBlockM, n * Traits::kBlockN);
  }
};

struct DenseVariant {
  struct Args {};
  template <class Traits>
  using Tile = TileInfo<Traits>;
  template <class Traits>
  using Scores = DenseScores<Traits>;
  template <class Traits>
  using Epilogue = OutputEpilogue<Traits>;
  static void set_tile_order(AttnFwdArgs& a, const Args&) {
    a.heads_per_group_log2 = head_group_log2(mask_varies_work(a.mask), a.num_m_blocks, a.heads_q, a.num_sms);
  }
};

}  // namespace attnkit::cuda::attn
