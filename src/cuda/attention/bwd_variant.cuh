// src/cuda/attention/bwd_variant.cuh — what varies between the kernels built on the backward
// mainloop (bwd_kernel.cuh): which query tiles a key tile visits, and how a tile of scores becomes
// probabilities. A backward Variant names four things:
//   Args             extra kernel parameters beside AttnBwdArgs (BwdParams::extra)
//   key_tiles_differ(extra)  whether its key tiles meet different numbers of query tiles beyond
//                    what AttnBwdArgs::mask says (host; picks the launch order: launch_order.hpp)
//   ordered_dq_convoys(extra)  whether, with ordered dQ adds, key tiles launched side by side
//                    would queue for the same query tiles (host; launch_order.hpp)
//   Tile<Traits>     built from (args, extra) in every role of the CTA (key tile, query head,
//                    sequence: bwd_cta): n_block, head, batch, seq, skip(), num_query_tiles(),
//                    query_tile(j) — the j-th query tile in visiting order, head_offset(j) —
//                    its query head's offset from the CTA's (AttnBwdArgs::heads_per_cta_log2;
//                    a variant without packed heads returns 0), visit(j) — that
//                    tile as the consumers need it (BwdVisit: also whether it is a full block,
//                    one load where the tiles come from a list), dq_turn(j) — for
//                    ordered dQ, how many key tiles of its chain before this one add into that
//                    query tile —, dq_chain() — its chain (AttnBwdArgs::dq_chains; 0 where the
//                    variant has one) — and row_block(a, m, head_offset)
//   Probs<Traits>    built once per consumer warpgroup from (args, extra, tile, wg, ids: the
//                    CTA's SharedStorage::variant_ids); start_tile(visit) runs as a tile's S and dP
//                    GEMMs start (loads whose value it returns, to be used once they are done), and
//                    operator()(tSrS, tdVrP, cS, lse2, visit, started) turns the fp32 S^T fragment of the
//                    visited query tile into P^T in 16 bits (tdVrP, the A operand of dV)
//                    and, in place, P^T times d(score)/d(q.k * scale) (what dS needs)
// The chain rule's common factor, the scale, is applied to dK and dQ at the end. This file holds
// the softmax attention variant (mask rule, softcap); flex attention's is in
// src/cuda/flex/bwd_variant.cuh.
#pragma once
#include <cmath>

#include "src/cuda/attention/bwd_scores.cuh"
#include "src/cuda/attention/bwd_tile.cuh"

namespace attnkit::cuda::attn {

template <class Traits, class Tile>
struct DenseBwdProbs {
  const AttnBwdArgs& a;
  const Tile& tile;
  int wg;

  template <class Extra>
  CUTE_DEVICE DenseBwdProbs(const AttnBwdArgs& a_, const Extra&, const Tile& tile_, int wg_, int32_t*)
      : a(a_), tile(tile_), wg(wg_) {}

  CUTE_DEVICE int32_t start_tile(BwdVisit) const { return 0; }

  template <class TensorS, class TensorP, class TensorC>
  CUTE_DEVICE void operator()(TensorS& tSrS, TensorP& tdVrP, TensorC const& cS, const float* lse2, BwdVisit visit,
                              int32_t) const {
    using T = Traits;
    const int key0 = tile.n_block * T::kBlockN, row0 = visit.m * T::kBlockM;
    // Per-element masking unless every key of this warpgroup is visible to every query row of the
    // tile (rows past the sequence end have lse2 = +inf and so P = 0 without a mask).
    const int wg_key_first = key0 + T::wg_key0(wg), wg_key_last = wg_key_first + 63;
    const int first_row = row0 + T::wg_query0(wg);
    const int last_row = min(first_row + T::kWgQueries, tile.seq.seqlen_q) - 1;
    const bool needs_mask = wg_key_last >= tile.seq.seqlen_k || tile.rule.lo(last_row) > wg_key_first ||
                            tile.rule.hi(first_row) < wg_key_last;
    const bool softcap = a.softcap > 0.f;
    const ProbArgs pa{softcap ? float(M_LOG2E) : a.scale * float(M_LOG2E), a.softcap, softcap ? a.scale / a.softcap : 0.f,
                      key0, row0, tile.rule};
    const bool left_edge = tile.rule.left >= 0;
    if (softcap) {
      if (!needs_mask) scores_to_probs<true, false>(tSrS, tdVrP, cS, lse2, pa);
      else if (left_edge) scores_to_probs<true, true, true>(tSrS, tdVrP, cS, lse2, pa);
      else scores_to_probs<true, true>(tSrS, tdVrP, cS, lse2, pa);
    } else {
      if (!needs_mask) scores_to_probs<false, false>(tSrS, tdVrP, cS, lse2, pa);
      else if (left_edge) scores_to_probs<false, true, true>(tSrS, tdVrP, cS, lse2, pa);
      else scores_to_probs<false, true>(tSrS, tdVrP, cS, lse2, pa);
    }
  }
};

// kPackedHeads: GQA's heads packed in the CTA (AttnBwdArgs::heads_per_cta_log2 > 0), its own kernel.
template <bool kPackedHeads>
struct DenseBwdVariantT {
  struct Args {};
  static bool key_tiles_differ(const Args&) { return false; }  // beyond what the mask says (launch_order.hpp)
  static bool ordered_dq_convoys(const Args&) { return false; }
  template <class Traits>
  using Tile = BwdTileInfo<Traits, kPackedHeads>;
  template <class Traits>
  using Probs = DenseBwdProbs<Traits, BwdTileInfo<Traits, kPackedHeads>>;
};
using DenseBwdVariant = DenseBwdVariantT<false>;
using PackedGqaBwdVariant = DenseBwdVariantT<true>;

}  // namespace attnkit::cuda::attn
