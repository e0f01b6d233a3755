// src/cuda/attention/fwd_tile.cuh — the persistent tile scheduler of the forward kernel and what a
// role needs to know about one tile (sequence span, mask, key-tile range).
//
// Tiles are (query tile m, head, batch) with m fastest and reversed: concurrent CTAs work on the
// same few heads and share their K/V in L2 (K/V tiles are re-read by every query tile; without
// that reuse the kernel would need ~4.7 TB/s at D128), and with a causal mask the query tiles
// that see the most keys start first — across groups of heads (launch_order.hpp: fwd_tile_at), so
// that the last heads' longest tiles do not start last. Tiles are handed out dynamically: CTA c
// starts with tile c, then takes the next index from a global counter. Static round-robin was
// measured 1.5-1.8x imbalanced on long causal shapes (docs/perf/attention_fwd.md).
#pragma once
#include <cute/tensor.hpp>

#include "attnkit/semantics/mask.hpp"
#include "src/cuda/attention/fwd_args.hpp"
#include "src/cuda/attention/launch_order.hpp"

namespace attnkit::cuda::attn {

using namespace cute;

// Where sequence `b` sits: packed offsets for varlen, plain lengths otherwise (forward or
// backward args: both have cu_seqlens_q/k and seqlen_q/k).
struct SeqInfo {
  int offset_q, seqlen_q, offset_k, seqlen_k;
  template <class Args>
  CUTE_DEVICE SeqInfo(const Args& a, int b) {
    if (a.cu_seqlens_q) {
      offset_q = a.cu_seqlens_q[b];
      seqlen_q = a.cu_seqlens_q[b + 1] - offset_q;
      offset_k = a.cu_seqlens_k[b];
      seqlen_k = a.cu_seqlens_k[b + 1] - offset_k;
    } else {
      offset_q = offset_k = 0;
      seqlen_q = a.seqlen_q;
      seqlen_k = a.seqlen_k;
    }
  }
};

template <class Traits>
struct TileInfo {
  using Shared = TileInfo;  // plain values: the producer shares it whole (fwd_traits.cuh, tile_desc)
  int m_block, head, batch;
  SeqInfo seq;
  MaskRuleT<int> rule;
  int n_begin, n_end;  // key tiles [n_begin, n_end) that some row of this query tile sees

  template <class Extra>
  CUTE_DEVICE TileInfo(const AttnFwdArgs& a, const Extra&, int tile) : TileInfo(a, tile) {}
  template <class Extra>
  CUTE_DEVICE TileInfo(const TileInfo& shared, const Extra&) : TileInfo(shared) {}  // the producer's copy
  CUTE_DEVICE TileInfo(const AttnFwdArgs& a, int tile)
      : TileInfo(a, fwd_tile_at(tile, a.num_m_blocks, a.heads_q, a.heads_per_group_log2)) {}
  CUTE_DEVICE TileInfo(const AttnFwdArgs& a, FwdTileAt at) : m_block(at.m_block), head(at.head), batch(at.batch), seq(a, batch) {
    rule = MaskRuleT<int>::make(a.mask, seq.seqlen_q, seq.seqlen_k);
    n_begin = n_end = 0;
    if (skip()) return;
    const int row_first = m_block * Traits::kBlockM;
    const int row_last = min(seq.seqlen_q, row_first + Traits::kBlockM) - 1;
    const int lo = rule.lo(row_first), hi = rule.hi(row_last);  // lo, hi grow with the row
    if (hi < lo || hi < 0) return;
    n_begin = lo / Traits::kBlockN;
    n_end = hi / Traits::kBlockN + 1;
  }
  // The query tile lies past the end of this (varlen) sequence: nothing to do.
  CUTE_DEVICE bool skip() const { return m_block * Traits::kBlockM >= seq.seqlen_q; }
  // The key tiles in the order producer and consumers walk them: the last first (the one the
  // sequence end or the causal diagonal cuts, so the running max starts there).
  CUTE_DEVICE int num_key_tiles() const { return n_end - n_begin; }
  CUTE_DEVICE int key_tile(int i) const { return n_end - 1 - i; }
};

}  // namespace attnkit::cuda::attn
