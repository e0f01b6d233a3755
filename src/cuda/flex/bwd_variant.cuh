// src/cuda/flex/bwd_variant.cuh — flex attention as a variant of the Hopper backward kernel
// (src/cuda/attention/bwd_variant.cuh says what a backward variant is). The mainloop, pipelines,
// dQ writer and epilogue are the softmax attention backward's; flex changes two things:
//   - which query tiles a key tile visits: the query tiles of the query blocks whose BlockMask row
//     lists this key block (last to first; in the default mode the partial blocks' first), from
//     the lists bwd_lists.cuh builds out of the BlockMask's kv lists; or every query tile without
//     a BlockMask;
//   - the probabilities: s = score_mod(scale * q.k, b, h, q, kv) with its derivative ds, -inf
//     where mask_mod says no (partial blocks only) or past the key sequence's end, then
//     P = exp2(s * log2 e - lse2) and P * ds for dS.
// A key tile is kBlockN keys of one BlockMask key block (block_k / kBlockN tiles per block); a
// query tile is 64 rows of one query block (block_q / 64 tiles per block).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "attnkit/semantics/flex_mods.hpp"
#include "src/cuda/attention/bwd_scores.cuh"
#include "src/cuda/attention/bwd_variant.cuh"
#include "src/cuda/flex/fwd_variant.cuh"  // has_parts_v

namespace attnkit::cuda::flex {

using namespace cute;
using attn::SeqInfo;

template <class ScoreMod, class MaskMod>
struct FlexBwdArgs {
  ScoreMod score_mod;
  MaskMod mask_mod;
  bool use_score_mod = true;  // false: identity (the scale then folds into the exponent)
  bool use_mask_mod = true;   // false: every visited element is visible
  bool block_mask = false;    // false: every query tile is visited, as partial
  QueryTileLists lists;
  int tiles_per_block = 1;    // block_k / kBlockN
};

template <class Traits, class Args>
struct FlexBwdTile {
  const Args& f;
  int n_block, head, batch;
  SeqInfo seq;
  int row_base;      // first padded row of this sequence in lse2 / delta / dq_accum
  int list = 0;  // this key block's row of the lists
  int n_total = 0;

  CUTE_DEVICE FlexBwdTile(const AttnBwdArgs& a, const Args& f_) : FlexBwdTile(a, f_, attn::bwd_cta(a)) {}
  CUTE_DEVICE FlexBwdTile(const AttnBwdArgs& a, const Args& f_, BwdCta cta)
      : f(f_), n_block(cta.n_block), head(cta.head), batch(cta.batch), seq(a, batch), row_base(bwd_row_base(a, batch, 0)) {
    if (skip()) return;
    if (!f.block_mask) {
      n_total = (seq.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
      return;
    }
    list = static_cast<int>(f.lists.row(batch, head, n_block / f.tiles_per_block));
    n_total = f.lists.num[list];
  }
  CUTE_DEVICE bool skip() const { return n_block * Traits::kBlockN >= seq.seqlen_k; }
  CUTE_DEVICE int num_query_tiles() const { return n_total; }
  CUTE_DEVICE int32_t entry(int j) const { return f.lists.tiles[int64_t(list) * f.lists.m_tiles + j]; }
  // In the lists' order (block_lists.hpp); without a BlockMask last first, as the dense path. One
  // load of the list entry gives the tile and its full-block flag.
  CUTE_DEVICE attn::BwdVisit visit(int j) const {
    if (!f.block_mask) return {n_total - 1 - j, false};
    const int32_t e = entry(j);
    return {QueryTileLists::query_tile_of(e), QueryTileLists::is_full(e)};
  }
  CUTE_DEVICE int query_tile(int j) const { return visit(j).m; }
  static constexpr bool kPacked = false;  // a CTA per query head
  CUTE_DEVICE static constexpr int head_offset(int) { return 0; }
  // Key tiles before this one adding into the j-th visited query tile: those of the earlier key
  // blocks that meet its query block, then the earlier tiles of this block.
  CUTE_DEVICE int dq_turn(int j) const {
    if (!f.block_mask) return n_block;
    return f.lists.turns[int64_t(list) * f.lists.m_tiles + j] * f.tiles_per_block + n_block % f.tiles_per_block;
  }
  CUTE_DEVICE static constexpr int dq_chain() { return 0; }  // one chain (flex's turns are per key block)
  CUTE_DEVICE int64_t row_block(const AttnBwdArgs& a, int m, int = 0) const {
    return head * a.rows_padded + row_base + m * Traits::kBlockM;  // < 2^31: bwd_workspace.hpp
  }
};

// A score mod whose derivative follows from its output (the catalog: its parts are applied one
// pass each, as in the forward, and no per-element derivative has to stay in registers).
template <class M, class = void>
inline constexpr bool has_derivative_from_output_v = false;
template <class M>
inline constexpr bool has_derivative_from_output_v<
    M, std::void_t<decltype(std::declval<const M&>().derivative_from_output(0.f))>> = true;

// Whether the catalog's document part is on (uniform over the launch): the probabilities' id
// compares (FlexBwdProbs) and the deterministic launch order (FlexBwdVariant) both ask.
template <class Args>
CUTE_HOST_DEVICE bool documents_on(const Args& f) {
  if constexpr (std::is_same_v<decltype(Args::mask_mod), CatalogMaskMod>) return f.use_mask_mod && f.mask_mod.document.doc_q != nullptr;
  else return false;
}

template <class Traits, class Args>
struct FlexBwdProbs {
  using ScoreMod = decltype(Args::score_mod);
  using MaskMod = decltype(Args::mask_mod);
  const AttnBwdArgs& a;
  const Args& f;
  const FlexBwdTile<Traits, Args>& tile;
  int wg;
  // The catalog's document part (doc_q[b, q] == doc_kv[b, kv]) compares ids in shared memory: the
  // key tile's kBlockN key ids, loaded once per CTA, and this warpgroup's 64 row ids of each
  // partial tile, one a thread (t < 64), loaded as the tile's GEMMs start (start_tile) and stored
  // once they are done. The per-element pass read 18 ids a thread from L2 after the S wait, on
  // every partial tile's chain (docs/perf/flex_bwd.md, v25).
  int32_t* key_ids;  // [kBlockN]
  int32_t* row_ids;  // [64], this warpgroup's

  CUTE_DEVICE FlexBwdProbs(const AttnBwdArgs& a_, const Args& f_, const FlexBwdTile<Traits, Args>& tile_, int wg_,
                           int32_t* ids)
      : a(a_), f(f_), tile(tile_), wg(wg_), key_ids(ids), row_ids(ids + Traits::kBlockN + 64 * wg_) {
    if constexpr (std::is_same_v<MaskMod, CatalogMaskMod>) {
      if (!documents()) return;
      const DocumentMaskMod& d = f.mask_mod.document;
      const int t = threadIdx.x % 128, key = tile.n_block * Traits::kBlockN + Traits::wg_key0(wg) + t;
      if (t < 64)
        key_ids[Traits::wg_key0(wg) + t] = d.key_doc(tile.batch, min(key, tile.seq.seqlen_k - 1));
      cutlass::arch::NamedBarrier::sync(128, attn::kBarrierVariant + wg);  // (each warpgroup reads its own keys)
    }
  }

  CUTE_DEVICE bool documents() const { return documents_on(f); }

  // This thread's row id of the tile where the document part will run (t < 64; else unused).
  CUTE_DEVICE int32_t start_tile(attn::BwdVisit visit) const {
    if constexpr (std::is_same_v<MaskMod, CatalogMaskMod>) {
      if (!documents() || visit.full) return 0;
      const DocumentMaskMod& d = f.mask_mod.document;
      const int t = threadIdx.x % 128, row = visit.m * Traits::kBlockM + Traits::wg_query0(wg) + t;
      return t < 64 ? d.query_doc(tile.batch, min(row, tile.seq.seqlen_q - 1)) : 0;
    } else {
      return 0;
    }
  }

  // fn(x, q, kv) for every element (key, query) of the S^T fragment. Rows past Sq (P = 0: their
  // lse2 is +inf) and keys past Sk (masked) are clamped so that a mod reading per-position tables
  // stays inside them.
  template <class TensorS, class TensorC, class F>
  CUTE_DEVICE void for_each_score(TensorS& tSrS, TensorC const& cS, int key0, int row0, F&& fn) const {
    const int sq = tile.seq.seqlen_q, sk = tile.seq.seqlen_k;
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i)
      fn(tSrS(i), int64_t(min(row0 + get<1>(cS(i)), sq - 1)), int64_t(min(key0 + get<0>(cS(i)), sk - 1)));
  }

  template <class TensorS, class TensorP, class TensorC>
  CUTE_DEVICE void operator()(TensorS& tSrS, TensorP& tdVrP, TensorC const& cS, const float* lse2,
                              attn::BwdVisit visit, int32_t started) const {
    const int key0 = tile.n_block * Traits::kBlockN, row0 = visit.m * Traits::kBlockM;
    const int64_t b = tile.batch, h = tile.head;
    const bool use_mask = !is_no_mask_v<MaskMod> && f.use_mask_mod && !visit.full;
    // Without a score mod P is taken of the unscaled scores, the scale folding into the exponent,
    // unless it is <= 0: masked scores are -inf, which needs a positive unit.
    const bool scaled = f.use_score_mod || !(a.scale > 0.f);
    const float scale_log2 = scaled ? float(M_LOG2E) : a.scale * float(M_LOG2E);
    constexpr bool kScorePasses = has_derivative_from_output_v<ScoreMod>;
    if constexpr (!kScorePasses && !std::is_same_v<ScoreMod, IdentityScoreMod>) {
      if (f.use_score_mod) return fused(tSrS, tdVrP, cS, lse2, use_mask, key0, row0);
    }
    // Score mod, one pass per part (scores are then scale * q.k, as torch's score_mod sees them).
    if (f.use_score_mod) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) *= a.scale;
      if constexpr (kScorePasses) {
        auto pass = [&](const auto& mod) __attribute__((always_inline)) {
          for_each_score(tSrS, cS, key0, row0, [&](float& x, int64_t q, int64_t kv) __attribute__((always_inline)) {
            float ds;
            x = mod(x, b, h, q, kv, &ds);
          });
        };
        if constexpr (has_parts_v<ScoreMod>) f.score_mod.for_each_part(pass);
        else pass(f.score_mod);
      }
    } else if (scaled) {  // no score mod, a scale <= 0: scaled first all the same
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i) tSrS(i) *= a.scale;
    }
    // Mask mod, one pass per part, skipped where the part holds on this warpgroup's whole box of
    // scores (its 64 keys, its query rows): of the sliding window's four partial tiles a key tile
    // meets, most warpgroups then need one part's pass or none. Then keys past Sk.
    if (use_mask) {
      const int64_t kv_lo = key0 + Traits::wg_key0(wg), q_lo = row0 + Traits::wg_query0(wg);
      auto pass = [&](const auto& mod) __attribute__((always_inline)) {
        using Part = std::decay_t<decltype(mod)>;
        if (holds_on_box(mod, q_lo, q_lo + Traits::kWgQueries - 1, kv_lo, kv_lo + 63)) return;
        if constexpr (is_diagonal_band_v<Part>) {
          // q - kv against the part's band, in 32 bits and unclamped (these parts read no table;
          // rows past Sq have P = 0, keys past Sk are masked below; positions are below 2^30).
          const DiagonalBand band = diagonal_band(mod);
          const int lo = int(max<int64_t>(band.lo, INT32_MIN)), hi = int(min<int64_t>(band.hi, INT32_MAX));
          CUTE_UNROLL
          for (int i = 0; i < size(tSrS); ++i) {
            const int d = (row0 + get<1>(cS(i))) - (key0 + get<0>(cS(i)));
            if (d < lo || d > hi) tSrS(i) = -INFINITY;
          }
        } else if constexpr (std::is_same_v<Part, DocumentMaskMod> && std::is_same_v<MaskMod, CatalogMaskMod>) {
          // (The ids are clamped at the sequence ends as for_each_score clamps positions.)
          if (threadIdx.x % 128 < 64) row_ids[threadIdx.x % 128] = started;
          cutlass::arch::NamedBarrier::sync(128, attn::kBarrierVariant + wg);
          CUTE_UNROLL
          for (int i = 0; i < size(tSrS); ++i)
            if (key_ids[get<0>(cS(i))] != row_ids[get<1>(cS(i)) - Traits::wg_query0(wg)]) tSrS(i) = -INFINITY;
        } else {
          for_each_score(tSrS, cS, key0, row0, [&](float& x, int64_t q, int64_t kv) __attribute__((always_inline)) {
            if (!mod(b, h, q, kv)) x = -INFINITY;
          });
        }
      };
      if constexpr (has_parts_v<MaskMod>) f.mask_mod.for_each_part(pass);
      else if constexpr (!is_no_mask_v<MaskMod>) pass(f.mask_mod);
    }
    if (key0 + Traits::kBlockN > tile.seq.seqlen_k) {
      CUTE_UNROLL
      for (int i = 0; i < size(tSrS); ++i)
        if (key0 + get<0>(cS(i)) >= tile.seq.seqlen_k) tSrS(i) = -INFINITY;
    }
    // P, and for dS P times d(score mod). Without a score mod the derivative is 1 and dS needs P
    // alone: a loop of its own (the derivative and a select of 1 per element were ~10% of the
    // kernel's instructions; docs/perf/flex_bwd.md).
    if constexpr (kScorePasses) {
      if (f.use_score_mod) return probs_from_scores<true>(tSrS, tdVrP, cS, lse2, scale_log2);
    }
    probs_from_scores<false>(tSrS, tdVrP, cS, lse2, scale_log2);
  }

  template <bool kDerivative, class TensorS, class TensorP, class TensorC>
  CUTE_DEVICE void probs_from_scores(TensorS& tSrS, TensorP& tdVrP, TensorC const& cS, const float* lse2,
                                     float scale_log2) const {
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) {
      const float x = tSrS(i);
      const float p = attn::exp2_approx(x * scale_log2 - lse2[get<1>(cS(i))]);
      tdVrP(i) = typename TensorP::value_type(p);
      // (0 wherever P is: a masked score's derivative may not be finite.)
      if constexpr (kDerivative) tSrS(i) = p > 0.f ? p * f.score_mod.derivative_from_output(x) : 0.f;
      else tSrS(i) = p;
    }
  }

  // A score mod without derivative_from_output: the mod, its derivative, the mask and P per element.
  template <class TensorS, class TensorP, class TensorC>
  CUTE_DEVICE void fused(TensorS& tSrS, TensorP& tdVrP, TensorC const& cS, const float* lse2, bool use_mask, int key0,
                         int row0) const {
    const int sq = tile.seq.seqlen_q, sk = tile.seq.seqlen_k;
    const int64_t b = tile.batch, h = tile.head;
    CUTE_UNROLL
    for (int i = 0; i < size(tSrS); ++i) {
      const int key = key0 + get<0>(cS(i)), col = get<1>(cS(i));
      const int64_t q = min(row0 + col, sq - 1), kv = min(key, sk - 1);
      float ds = 1.f;
      const float x = f.score_mod(tSrS(i) * a.scale, b, h, q, kv, &ds);
      bool visible = key < sk;
      if constexpr (!is_no_mask_v<MaskMod>) visible = visible && (!use_mask || f.mask_mod(b, h, q, kv));
      const float p = attn::exp2_approx(visible ? x * float(M_LOG2E) - lse2[col] : -INFINITY);
      tdVrP(i) = typename TensorP::value_type(p);
      tSrS(i) = p > 0.f ? p * ds : 0.f;
    }
  }
};

template <class ScoreMod, class MaskMod>
struct FlexBwdVariant {
  using Args = FlexBwdArgs<ScoreMod, MaskMod>;
  template <class Traits>
  using Tile = FlexBwdTile<Traits, Args>;
  template <class Traits>
  using Probs = FlexBwdProbs<Traits, Args>;
  // A BlockMask gives key tiles lists of different lengths: grouped launch order (launch_order.hpp).
  static bool key_tiles_differ(const Args& f) { return f.block_mask; }
  // The catalog's document mask: a document's key tiles all start at its last query tile
  // (launch_order.hpp, all_heads_group_log2).
  static bool ordered_dq_convoys(const Args& f) { return documents_on(f); }
};

using CatalogBwdVariant = FlexBwdVariant<CatalogScoreMod, CatalogMaskMod>;

}  // namespace attnkit::cuda::flex
