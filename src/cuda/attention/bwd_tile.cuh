// src/cuda/attention/bwd_tile.cuh — what a role of the backward kernel needs to know about its CTA:
// the key tile (blockIdx.x), query head (y) and sequence (z), and which query tiles see those keys.
// This is the softmax attention variant's Tile (bwd_variant.cuh says what a Tile provides).
//
// The query tiles a key tile meets form one range (bwd_ranges.hpp). Key tiles are launched in
// order (blockIdx.x ascending; across heads in groups: bwd_cta), so with a causal mask the tiles
// that meet the most queries start first.
#pragma once
#include "src/cuda/attention/bwd_args.hpp"
#include "src/cuda/attention/bwd_ranges.hpp"
#include "src/cuda/attention/fwd_tile.cuh"
#include "src/cuda/attention/launch_order.hpp"

namespace attnkit::cuda::attn {

// Named barriers of the backward kernel (0 is __syncthreads): dS complete (the 256 consumer
// threads), and per staging buffer b the full / empty hand-off between the consumers and the dQ
// writer warp (ids + b); kBarrierDqAdded: the consumers' direct dQ adds all issued (their arrival),
// before the writer counts them; kBarrierVariant + wg: a consumer warpgroup's own, for its Probs
// variant's shared-memory ids (bwd_variant.cuh).
enum BwdNamedBarrier : int {
  kBarrierDsReady = 1, kBarrierDqFull = 2, kBarrierDqEmpty = 4, kBarrierDqAdded = 6, kBarrierVariant = 7
};

// A visited query tile as the consumers see it: its index, whether the variant knows every score
// of it visible (flex: a full block, mask_mod skipped; the softmax variant decides per tile), and
// its query head's offset from the CTA's first (AttnBwdArgs::heads_per_cta_log2; else 0).
struct BwdVisit {
  int m;
  bool full;
  int head_offset = 0;
};

// This CTA's key tile, (first) query head and sequence (launch_order.hpp: grouped launch order;
// in the kernel with heads packed, the grid's heads are groups of 2^heads_per_cta_log2 query heads).
template <bool kPacked>
CUTE_DEVICE BwdCta packed_heads(BwdCta cta, const AttnBwdArgs& a) {
  if constexpr (kPacked) cta.head <<= a.heads_per_cta_log2;
  return cta;
}
template <bool kPacked = false>
CUTE_DEVICE BwdCta bwd_cta(const AttnBwdArgs& a) {
  return packed_heads<kPacked>(bwd_cta_at(blockIdx.x, blockIdx.y, blockIdx.z, a.heads_per_group_log2), a);
}

// The same, with blockIdx read where it is used: ptxas shares plain blockIdx reads across the
// kernel's roles, and a value kept live from the kernel's entry spilled in the consumers. For the
// few uses outside the roles' own tiles (the dQ count, the wait for the preprocess).
template <int kDim>
CUTE_DEVICE unsigned ctaid_unhoisted() {
  unsigned v;
  if constexpr (kDim == 0) asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  else if constexpr (kDim == 1) asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v));
  else asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(v));
  return v;
}
// The CTA's query heads: its group in the packed kernel, else one.
template <bool kPacked>
CUTE_DEVICE int cta_query_heads(const AttnBwdArgs& a) {
  return kPacked ? 1 << a.heads_per_cta_log2 : 1;
}
template <bool kPacked>
CUTE_DEVICE BwdCta bwd_cta_unhoisted(const AttnBwdArgs& a) {
  return packed_heads<kPacked>(bwd_cta_at(ctaid_unhoisted<0>(), ctaid_unhoisted<1>(), ctaid_unhoisted<2>(), a.heads_per_group_log2), a);
}

// What a Tile of the packed kernel knows of its heads: log2 of their number and the rows between
// two heads' blocks (a.rows_padded); nothing in the other kernel.
template <bool kPackedHeads>
struct PackedHeads {
  static constexpr int log2 = 0, head_rows = 0;
  CUTE_DEVICE explicit PackedHeads(const AttnBwdArgs&) {}
};
template <>
struct PackedHeads<true> {
  int log2, head_rows;
  CUTE_DEVICE explicit PackedHeads(const AttnBwdArgs& a) : log2(a.heads_per_cta_log2), head_rows(a.rows_padded) {}
};

// kPackedHeads: GQA's heads packed in the CTA (AttnBwdArgs::heads_per_cta_log2), a kernel of its
// own: in the other, every head offset is the constant 0 and the visit loops compile as without
// packing (with the packing decided at run time, bench_attention_bwd.py read the MHA rows 1-3%
// lower; the probe could not tell it from noise: docs/perf/attention_bwd.md).
template <class Traits, bool kPackedHeads = false>
struct BwdTileInfo {
  static constexpr bool kPacked = kPackedHeads;
  int n_block, head, batch;  // head: the first of the CTA's 2^pack_log2() query heads
  SeqInfo seq;
  MaskRuleT<int> rule;
  int m_begin, m_end;
  int rows0;  // first padded row of this (head, sequence) in lse2 / delta / dq_accum
  int chains;  // ordered dQ chains (AttnBwdArgs::dq_chains)
  PackedHeads<kPackedHeads> packed;

  template <class Extra>
  CUTE_DEVICE BwdTileInfo(const AttnBwdArgs& a, const Extra&) : BwdTileInfo(a) {}
  CUTE_DEVICE explicit BwdTileInfo(const AttnBwdArgs& a) : BwdTileInfo(a, bwd_cta<kPackedHeads>(a)) {}
  CUTE_DEVICE BwdTileInfo(const AttnBwdArgs& a, BwdCta cta)
      : n_block(cta.n_block), head(cta.head), batch(cta.batch), seq(a, batch), chains(a.dq_chains),
        packed(a) {
    rule = MaskRuleT<int>::make(a.mask, seq.seqlen_q, seq.seqlen_k);
    const QueryRange r(rule, seq.seqlen_q, n_block, Traits::kBlockM, Traits::kBlockN);
    m_begin = r.m_begin;
    m_end = skip() ? m_begin : r.m_end;
    rows0 = head * a.rows_padded + bwd_row_base(a, batch, seq.offset_q);  // < 2^31: bwd_workspace.hpp
  }
  // The key tile lies past the end of this (varlen) sequence: nothing to do, nothing to write.
  CUTE_DEVICE bool skip() const { return n_block * Traits::kBlockN >= seq.seqlen_k; }
  CUTE_DEVICE int pack_log2() const { return packed.log2; }
  // Query tiles in visiting order: last to first (see bwd_consumer.cuh); with heads packed, each
  // query tile for every head of the CTA in turn (the j-th visit: tile j >> pack_log2(), head
  // offset j & (2^pack_log2() - 1)).
  CUTE_DEVICE int num_query_tiles() const { return (m_end - m_begin) << pack_log2(); }
  CUTE_DEVICE int query_tile(int j) const { return m_end - 1 - (j >> pack_log2()); }
  CUTE_DEVICE int head_offset(int j) const { return j & ((1 << pack_log2()) - 1); }
  CUTE_DEVICE BwdVisit visit(int j) const { return {query_tile(j), false, head_offset(j)}; }
  // Ordered dQ: how many key tiles of this one's chain add into the j-th visited query tile before it.
  CUTE_DEVICE int dq_turn(int j) const {
    return cuda::dq_turn_in_chain(rule, query_tile(j), n_block, Traits::kBlockM, Traits::kBlockN, chains);
  }
  CUTE_DEVICE int dq_chain() const { return n_block % chains; }
  // Index of query tile m's fp32 blocks (lse2, delta: kBlockM floats; dq_accum: kBlockM * D) of
  // the CTA's head + head_offset.
  CUTE_DEVICE int64_t row_block(const AttnBwdArgs&, int m, int head_offset = 0) const {
    return rows0 + head_offset * packed.head_rows + m * Traits::kBlockM;
  }
};

}  // namespace attnkit::cuda::attn
