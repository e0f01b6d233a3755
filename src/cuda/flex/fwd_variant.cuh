// src/cuda/flex/fwd_variant.cuh — flex attention as a variant of the Hopper forward kernel
// (src/cuda/attention/fwd_variant.cuh says what a variant is). The mainloop, pipelines, softmax
// and epilogue are the softmax attention kernel's; flex changes two things:
//   - which key tiles a query tile visits: the row of torch's BlockMask for this query block
//     (its partial blocks, then its full ones), or every key tile when no BlockMask is given;
//   - the scores: s = score_mod(scale * q.k, b, h, q, kv), then -inf where mask_mod says no
//     (partial blocks only: mask_mod is skipped on full ones) or past the key sequence's end.
// A query tile is one BlockMask row block (block_q == kBlockM); a BlockMask key block spans
// block_k / kBlockN key tiles. q, k, v are [B, H, S, D] (the dense path's strides, varlen off);
// with GQA packing (short queries) the kernel sees [B, Hkv, g * Sq, D] views of q and out.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <cutlass/arch/barrier.h>

#include "attnkit/semantics/flex_mods.hpp"
#include "src/cuda/flex/block_lists.hpp"
#include "src/cuda/flex/split_plan.hpp"
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/fwd_variant.cuh"

namespace attnkit::cuda::flex {

using namespace cute;
using attn::SeqInfo;

template <class ScoreMod, class MaskMod>
struct FlexArgs {
  ScoreMod score_mod;
  MaskMod mask_mod;
  bool use_score_mod = true;  // false: identity (the scale then folds into the exponent)
  bool use_mask_mod = true;   // false: every visited element is visible
  bool block_mask = false;    // false: every key tile is visited, as partial
  BlockList partial, full;
  int tiles_per_block = 1;    // block_k / kBlockN
  // Split-KV (split_plan.hpp): each query tile's key tiles in num_splits contiguous parts, each
  // part's normalised output and LSE written to the partial buffers; split_combine.cuh merges them.
  int num_splits = 1;
  float* partial_out = nullptr;  // fp32 [num_splits, B, Hq, Sq, D]
  float* partial_lse = nullptr;  // fp32 [num_splits, B, Hq, Sq]
  // GQA packing (split_plan.hpp's packed_query_heads): > 1 when a tile's rows are the query rows
  // of pack_heads heads stacked (row j * pack_rows + i: head pack_heads * tile.head + j, query i).
  // Read only by the packed instantiation (FlexVariant's kPackedHeads).
  int pack_heads = 1;
  int pack_rows = 1;          // the caller's Sq
  RowDivider pack_divider{};  // divides by pack_rows
};

// Key tiles of one query tile, in visiting order: partial blocks first, then full ones; with
// split-KV, part `split` of them. Only counts live in registers; list addresses are recomputed
// from the kernel parameters. Tile index: split fastest, then (m, head, batch) in the order of
// launch_order.hpp's fwd_tile_at_short_tail (with a BlockMask; without one, plain order).
// Its plain values, which the producer shares with the consumers (fwd_traits.cuh, tile_desc).
struct FlexTileShared {
  int split, m_block, head, batch;
  SeqInfo seq;
  int n_partial = 0, n_full = 0;  // listed blocks (without a BlockMask: key tiles, all partial)
  int first = 0, count = 0;       // this part's entries [first, first + count) of the visiting order

  CUTE_DEVICE FlexTileShared(const AttnFwdArgs& a, int num_splits, int tile)
      : FlexTileShared(a, tile % num_splits, fwd_tile_at_short_tail(tile / num_splits, a.num_m_blocks, a.heads_q, a.tail_m_blocks)) {}
  CUTE_DEVICE FlexTileShared(const AttnFwdArgs& a, int split_, FwdTileAt at)
      : split(split_), m_block(at.m_block), head(at.head), batch(at.batch), seq(a, batch) {}
};

template <class Traits, class Args>
struct FlexTile : FlexTileShared {
  using Shared = FlexTileShared;
  const Args& f;

  CUTE_DEVICE FlexTile(const AttnFwdArgs& a, const Args& f_, int tile) : FlexTileShared(a, f_.num_splits, tile), f(f_) {
    if (skip()) return;
    if (!f.block_mask) {
      n_partial = (seq.seqlen_k + Traits::kBlockN - 1) / Traits::kBlockN;
    } else {
      n_partial = f.partial.count(batch, head, m_block);
      n_full = f.full.count(batch, head, m_block);
    }
    const int total = (n_partial + n_full) * sub();
    const int per = (total + f.num_splits - 1) / f.num_splits;
    first = min(split * per, total);
    count = min(per, total - first);
  }
  CUTE_DEVICE FlexTile(const Shared& s, const Args& f_) : FlexTileShared(s), f(f_) {}  // the producer's values
  CUTE_DEVICE bool skip() const { return m_block * Traits::kBlockM >= seq.seqlen_q; }
  CUTE_DEVICE int sub() const { return f.block_mask ? f.tiles_per_block : 1; }  // key tiles per block
  CUTE_DEVICE int num_key_tiles() const { return count; }
  // (Both run per key tile in the consumers: no division where a block is one key tile.)
  CUTE_DEVICE bool is_full(int i) const { return first + i >= n_partial * sub(); }
  CUTE_DEVICE int key_tile(int i) const {
    const int j = first + i;
    if (!f.block_mask) return n_partial - 1 - j;  // the last tile first, as the dense path
    const int per = f.tiles_per_block;
    const int block = per == 1 ? j : j / per;
    const int kb = block < n_partial ? f.partial.row(batch, head, m_block)[block * f.partial.index_stride[3]]
                                     : f.full.row(batch, head, m_block)[(block - n_partial) * f.full.index_stride[3]];
    return per == 1 ? kb : kb * per + (j - block * per);
  }
};

// A score mod made of parts (the catalog's for_each_part) is applied one part per pass.
template <class M, class = void>
inline constexpr bool has_parts_v = false;
template <class M>
inline constexpr bool has_parts_v<M, std::void_t<decltype(std::declval<const M&>().for_each_part(0))>> = true;

template <class Traits, class Args, bool kPackedHeads>
struct FlexScores {
  using ScoreMod = decltype(Args::score_mod);
  using MaskMod = decltype(Args::mask_mod);
  const AttnFwdArgs& a;
  const Args& f;
  const FlexTile<Traits, Args>& tile;
  int wg;          // this consumer warpgroup: rows [64 wg, 64 wg + 64) of the tile
  float* scratch;  // Traits::kScratchFloats of shared memory, this warpgroup's own

  CUTE_DEVICE FlexScores(const AttnFwdArgs& a_, const Args& f_, const FlexTile<Traits, Args>& tile_, int wg_, float* scratch_)
      : a(a_), f(f_), tile(tile_), wg(wg_), scratch(scratch_) {}

  // With a score mod the scores are already scaled (score_mod sees scale * q.k, as torch's); after
  // the catalog's softcap they are in units of the cap (softcap_pass).
  CUTE_DEVICE float cap_units() const {  // the cap, or 0 where the scores are not in its units
    if constexpr (std::is_same_v<ScoreMod, CatalogScoreMod>) return f.use_score_mod ? f.score_mod.softcap.cap : 0.f;
    else return 0.f;
  }
  CUTE_DEVICE float lse_scale() const {
    const float cap = cap_units();
    return cap > 0.f ? cap : f.use_score_mod ? 1.f : a.scale;
  }
  CUTE_DEVICE float scale_log2() const { return lse_scale() * float(M_LOG2E); }

  // fn(s, h, q, kv) for every score of the tile. Rows past Sq (never stored) and columns past Sk
  // (masked afterwards) are clamped so that a mod reading per-position tables stays inside them.
  // The packed instantiation (kPackedHeads) takes each row's head and query from its packed index
  // (a multiply-high per row); the other keeps the tile's head, loop-invariant — per-row heads
  // there cost ALiBi 4% (docs/perf/flex_fwd.md, v11).
  template <class TensorS, class TensorC, class F>
  CUTE_DEVICE void for_each_score(TensorS& s_rc, TensorC const& coord_rc, int row0, int col0, int sq, int sk, F&& fn) const {
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(s_rc); ++mi) {
      const int r = min(row0 + get<0>(coord_rc(mi, 0)), sq - 1);
      int64_t h = tile.head, q = r;
      if constexpr (kPackedHeads) {
        const int j = f.pack_divider.divide(r);
        h = h * f.pack_heads + j;
        q = r - j * f.pack_rows;
      }
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni) fn(s_rc(mi, ni), h, q, int64_t(min(col0 + get<1>(coord_rc(mi, ni)), sk - 1)));
    }
  }

  // s = mod(s, b, h, q, kv) over the tile.
  template <class Mod, class TensorS, class TensorC>
  CUTE_DEVICE void score_pass(const Mod& mod, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0, int sq,
                              int sk) const {
    const int64_t b = tile.batch;
    for_each_score(s_rc, coord_rc, row0, col0, sq, sk, [&](float& s, int64_t h, int64_t q, int64_t kv) __attribute__((always_inline)) {
      float ds;
      s = mod(s, b, h, q, kv, &ds);
    });
  }

  // The catalog's rel_bias, s += table[h, q - kv + Sk - 1]: a 64-row x kBlockN-column tile reads
  // only 64 + kBlockN - 1 entries (one per diagonal). The warpgroup loads that band into its
  // scratch (coalesced), then each element reads band[(row - col) + kBlockN - 1] — a shared-memory
  // load at a constant offset from its row's base. Per-element global gathers (64 per thread) made
  // the instantiation spill. Entries outside the table (rows past Sq, columns past Sk) are clamped
  // into it; those scores are never stored or are masked afterwards.
  template <class TensorS, class TensorC>
  CUTE_DEVICE void rel_bias_pass(const RelBiasScoreMod& m, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0,
                                 int sk) const {
    constexpr int kBand = 64 + Traits::kBlockN - 1;
    static_assert(kBand <= Traits::kScratchFloats);
    const int d0 = row0 + 64 * wg - col0 - (Traits::kBlockN - 1);  // q - kv of band[0]
    const float* table = m.table + int64_t(tile.head) * m.head_stride;
    cutlass::arch::NamedBarrier::sync(128, 3 + wg);  // this warpgroup's reads of the last band are done
    for (int j = threadIdx.x % 128; j < kBand; j += 128)
      scratch[j] = table[int64_t(min(max(d0 + j + sk - 1, 0), 2 * sk - 2)) * m.stride];
    cutlass::arch::NamedBarrier::sync(128, 3 + wg);
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(s_rc); ++mi) {
      const float* band = scratch + (get<0>(coord_rc(mi, 0)) - 64 * wg) + Traits::kBlockN - 1;
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni) s_rc(mi, ni) += band[-get<1>(coord_rc(mi, ni))];
    }
  }

  // The catalog's ALiBi, s += slope[h] * (kv - q), without an integer-to-float conversion per
  // element (a quarter-rate instruction on the MUFU pipe the softmax's exp2 already fills): each
  // row's distance at the tile's first column is converted once, and a score's column offset
  // within the tile is a compile-time constant plus the thread's lane part. Up to 2^24 positions
  // apart every partial sum is an integer that float holds exactly, so the distance equals
  // float(kv - q) bit for bit, and so does the score (beyond, both are within a rounding of the
  // true distance). Rows past Sq and columns past Sk are not clamped as for_each_score clamps
  // them: those scores are never stored, or are masked afterwards. Unpacked instantiation only
  // (the packed one's head and query change per row).
  template <class TensorS, class TensorC>
  CUTE_DEVICE void alibi_pass(const AlibiScoreMod& m, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0) const {
    const float slope = m.slopes[int64_t(tile.head) * m.stride];
    const float lane_col = float(get<1>(coord_rc(0, 0)));  // this thread's first column in the tile
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(s_rc); ++mi) {
      const float first = float(col0 - (row0 + get<0>(coord_rc(mi, 0)))) + lane_col;  // kv - q at column lane_col
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni)
        s_rc(mi, ni) += slope * (first + float(get<1>(coord_rc(mi, ni)) - get<1>(coord_rc(0, 0))));
    }
  }

  // The catalog's softcap, the last score part: s <- tanh(s k), leaving the scores in units of the
  // cap, which the softmax's exponent and the LSE take (scale_log2, lse_scale): an FMUL and a
  // MUFU.TANH a score instead of the functor's three multiplies and MUFU.TANH (docs/perf/flex_fwd.md,
  // v21). k = 1 / cap on scaled scores (after rel_bias / ALiBi); scale / cap where softcap is the
  // only part (apply then skips the scale pass). Masks come after the score parts: -inf stays -inf.
  template <class TensorS>
  CUTE_DEVICE void softcap_pass(TensorS& s_rc, float k) const {
    CUTE_UNROLL
    for (int e = 0; e < size(s_rc); ++e) s_rc(e) = softcap_tanh(s_rc(e) * k);
  }

  // The catalog's document mask, doc_q[b, q] == doc_kv[b, kv]: the warpgroup loads its 64 rows'
  // and kBlockN columns' ids into its scratch (one coalesced load per thread, one latency), then
  // compares from shared memory, instead of 34 per-element global loads per thread on the key
  // tile's chain (documents forward +4%: docs/perf/flex_fwd.md, v13). Rows past Sq and columns
  // past Sk are clamped as in for_each_score.
  template <class TensorS, class TensorC>
  CUTE_DEVICE void document_pass(const DocumentMaskMod& m, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0,
                                 int sq, int sk) const {
    static_assert(64 + Traits::kBlockN <= Traits::kScratchFloats);
    int* ids = reinterpret_cast<int*>(scratch);  // [64 rows of this warpgroup | kBlockN columns]
    const int64_t b = tile.batch;
    const int r0 = row0 + 64 * wg;
    cutlass::arch::NamedBarrier::sync(128, 3 + wg);  // this warpgroup's reads of the scratch are done
    for (int j = threadIdx.x % 128; j < 64 + Traits::kBlockN; j += 128)
      ids[j] = j < 64 ? m.doc_q[b * m.q_strides[0] + int64_t(min(r0 + j, sq - 1)) * m.q_strides[1]]
                      : m.doc_kv[b * m.kv_strides[0] + int64_t(min(col0 + j - 64, sk - 1)) * m.kv_strides[1]];
    cutlass::arch::NamedBarrier::sync(128, 3 + wg);
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(s_rc); ++mi) {
      const int row_id = ids[get<0>(coord_rc(mi, 0)) - 64 * wg];
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni)
        if (ids[64 + get<1>(coord_rc(mi, ni))] != row_id) s_rc(mi, ni) = -INFINITY;
    }
  }

  // A mask part that keeps, in each row, the keys up to (kUpper) or from (!kUpper) an edge:
  // edge(row) is the row's last / first visible key. One 32-bit compare per score against the
  // row's edge moved to the thread's first column (a score's column offset from there is a
  // constant once unrolled), as the softmax kernel's causal mask (apply_mask_bounds), instead of
  // the generic per-element call on clamped 64-bit positions. Rows past Sq are not clamped (never
  // stored); keys past Sk are masked after the parts. Positions are below 2^30.
  template <bool kUpper, class TensorS, class TensorC, class Edge>
  CUTE_DEVICE void edge_pass(TensorS& s_rc, TensorC const& coord_rc, int row0, int col0, Edge&& edge) const {
    const int c0 = get<1>(coord_rc(0, 0));
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(s_rc); ++mi) {
      const int e = edge(row0 + get<0>(coord_rc(mi, 0))) - col0 - c0;
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(s_rc); ++ni) {
        const int c = get<1>(coord_rc(mi, ni)) - c0;
        if (kUpper ? c > e : c < e) s_rc(mi, ni) = -INFINITY;
      }
    }
  }

  // One catalog mask part over the tile. Causal, prefix-LM and the sliding window keep an edge
  // per row (edge_pass), and are skipped where they hold on this warpgroup's whole box of scores
  // (its 64 rows x kBlockN keys: holds_on_box), as the flex backward does: of the sliding
  // window's two partial tiles a row visits, each needs one of its two parts. The packed
  // instantiation's rows are several heads' queries: the generic pass there.
  template <class Part, class TensorS, class TensorC>
  CUTE_DEVICE void mask_part(const Part& part, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0, int sq,
                             int sk) const {
    constexpr bool kEdge = std::is_same_v<Part, CausalMaskMod> || std::is_same_v<Part, PrefixLmMaskMod> ||
                           std::is_same_v<Part, SlidingWindowMaskMod>;
    if constexpr (kEdge && !kPackedHeads) {
      const int q_lo = row0 + 64 * wg;
      if (holds_on_box(part, q_lo, q_lo + 63, col0, col0 + Traits::kBlockN - 1)) return;
      // The band parts' bounds come from diagonal_band (lo <= q - kv <= hi), as in the backward:
      // causal keeps kv <= q - lo, the window kv >= q - hi (a window past 2^30 is no edge).
      if constexpr (std::is_same_v<Part, CausalMaskMod>) {
        const int lo = int(diagonal_band(part).lo);
        edge_pass<true>(s_rc, coord_rc, row0, col0, [&](int q) { return q - lo; });
      } else if constexpr (std::is_same_v<Part, PrefixLmMaskMod>) {
        const int last = int(part.prefix_lengths[tile.batch * part.stride]) - 1;  // kv <= q || kv < prefix
        edge_pass<true>(s_rc, coord_rc, row0, col0, [&](int q) { return max(q, last); });
      } else {
        const int hi = int(min<int64_t>(diagonal_band(part).hi, int64_t(1) << 30));
        edge_pass<false>(s_rc, coord_rc, row0, col0, [&](int q) { return q - hi; });
      }
    } else if constexpr (std::is_same_v<Part, DocumentMaskMod> && !kPackedHeads) {
      document_pass(part, s_rc, coord_rc, row0, col0, sq, sk);  // packed rows: each its own query
    } else {
      mask_pass(part, s_rc, coord_rc, row0, col0, sq, sk);
    }
  }

  // s = -inf where mod(b, h, q, kv) is false.
  template <class Mod, class TensorS, class TensorC>
  CUTE_DEVICE void mask_pass(const Mod& mod, TensorS& s_rc, TensorC const& coord_rc, int row0, int col0, int sq,
                             int sk) const {
    const int64_t b = tile.batch;
    for_each_score(s_rc, coord_rc, row0, col0, sq, sk, [&](float& s, int64_t h, int64_t q, int64_t kv) __attribute__((always_inline)) {
      if (!mod(b, h, q, kv)) s = -INFINITY;
    });
  }

  template <class TensorS, class TensorC>
  CUTE_DEVICE void apply(TensorS& s_rc, TensorC const& coord_rc, int i, int n) const {
    const int row0 = tile.m_block * Traits::kBlockM, col0 = n * Traits::kBlockN;
    const int sq = tile.seq.seqlen_q, sk = tile.seq.seqlen_k;
    if (f.use_score_mod) {
      bool fold_scale = false;  // the catalog's softcap alone: the scale folds into its tanh's argument
      if constexpr (std::is_same_v<ScoreMod, CatalogScoreMod>)
        fold_scale = f.score_mod.softcap.cap > 0.f && !f.score_mod.rel_bias.table && !f.score_mod.alibi.slopes;
      if (!fold_scale) {
        CUTE_UNROLL
        for (int e = 0; e < size(s_rc); ++e) s_rc(e) *= a.scale;
      }
      if constexpr (has_parts_v<ScoreMod>) {
        f.score_mod.for_each_part([&](const auto& part) {
          using Part = std::decay_t<decltype(part)>;
          if constexpr (std::is_same_v<ScoreMod, CatalogScoreMod> && std::is_same_v<Part, SoftcapScoreMod>)
            softcap_pass(s_rc, fold_scale ? a.scale * part.inv_cap : part.inv_cap);
          else if constexpr (std::is_same_v<Part, RelBiasScoreMod>)
            rel_bias_pass(part, s_rc, coord_rc, row0, col0, sk);
          else if constexpr (std::is_same_v<Part, AlibiScoreMod> && !kPackedHeads)
            alibi_pass(part, s_rc, coord_rc, row0, col0);
          else
            score_pass(part, s_rc, coord_rc, row0, col0, sq, sk);
        });
      } else {
        score_pass(f.score_mod, s_rc, coord_rc, row0, col0, sq, sk);
      }
    }
    const bool use_mask = !is_no_mask_v<MaskMod> && f.use_mask_mod && !tile.is_full(i);
    if (use_mask) {
      if constexpr (has_parts_v<MaskMod>) {
        f.mask_mod.for_each_part([&](const auto& part) { mask_part(part, s_rc, coord_rc, row0, col0, sq, sk); });
      } else if constexpr (!is_no_mask_v<MaskMod>) {
        mask_pass(f.mask_mod, s_rc, coord_rc, row0, col0, sq, sk);
      }
    }
    if (col0 + Traits::kBlockN > sk) {  // the key tile crosses the sequence end
      CUTE_UNROLL
      for (int mi = 0; mi < size<0>(s_rc); ++mi)
        CUTE_UNROLL
        for (int ni = 0; ni < size<1>(s_rc); ++ni)
          if (col0 + get<1>(coord_rc(mi, ni)) >= sk) s_rc(mi, ni) = -INFINITY;
    }
  }
};

// The output: the caller's out / lse, or with split-KV this part's fp32 rows and LSE (always:
// the combine step needs them). Rows past Sq are not written.
template <class Traits>
struct FlexEpilogue {
  template <class Args, class Tile, class TensorO, class TensorC, int kRows>
  CUTE_DEVICE static void store(const AttnFwdArgs& a, const Args& f, const Tile& tile, TensorO const& o_rc,
                                TensorC const& coord_rc, const float (&lse)[kRows]) {
    if (f.num_splits == 1) return attn::OutputEpilogue<Traits>::store(a, f, tile, o_rc, coord_rc, lse);
    const int64_t rows = ((int64_t(tile.split) * a.batch + tile.batch) * a.heads_q + tile.head) * a.seqlen_q;
    CUTE_UNROLL
    for (int mi = 0; mi < size<0>(o_rc); ++mi) {
      const int row = tile.m_block * Traits::kBlockM + get<0>(coord_rc(mi, 0));
      if (row >= tile.seq.seqlen_q) continue;
      float* orow = f.partial_out + (rows + row) * Traits::kHeadDim;
      CUTE_UNROLL
      for (int ni = 0; ni < size<1>(o_rc); ni += 2)  // columns (c, c + 1) are adjacent registers
        *reinterpret_cast<float2*>(orow + get<1>(coord_rc(mi, ni))) = make_float2(o_rc(mi, ni), o_rc(mi, ni + 1));
      if (get<1>(coord_rc(mi, 0)) == 0) f.partial_lse[rows + row] = lse[mi];  // one thread of the quad
    }
  }
};

// kPackedHeads: the instantiation run when Args::pack_heads > 1 (GQA packing, fwd_setup.cuh).
template <class ScoreMod, class MaskMod, bool kPackedHeads = false>
struct FlexVariant {
  using Args = FlexArgs<ScoreMod, MaskMod>;
  template <class Traits>
  using Tile = FlexTile<Traits, Args>;
  template <class Traits>
  using Scores = FlexScores<Traits, Args, kPackedHeads>;
  template <class Traits>
  using Epilogue = FlexEpilogue<Traits>;
  // A BlockMask's rows differ in length by no rule the launch knows: the shortest rows of every
  // head last (launch_order.hpp). Without one every row visits every key tile: plain order.
  static void set_tile_order(AttnFwdArgs& a, const Args& f) {
    a.tail_m_blocks = f.block_mask ? short_tail_m_blocks(a.num_m_blocks, a.heads_q, a.num_sms) : 0;
  }
};

// The built-in catalog (flex.hpp's FlexMods): one instantiation per (dtype, head dim); which
// parts are on is runtime (use_score_mod / use_mask_mod and the functors' own fields).
// CatalogPackedVariant runs the short-query path's GQA packing (its own translation units, so the
// per-row head mapping costs nothing elsewhere).
using CatalogVariant = FlexVariant<CatalogScoreMod, CatalogMaskMod>;
using CatalogPackedVariant = FlexVariant<CatalogScoreMod, CatalogMaskMod, true>;

}  // namespace attnkit::cuda::flex
