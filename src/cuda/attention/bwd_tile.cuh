// src/cuda/attention/bwd_tile.cuh — what a role of the backward kernel needs to know about its CTA:
// the key tile (blockIdx.x), query head (y) and sequence (z), and which query tiles see those keys.
//
// The query tiles a key tile meets form one range [m_begin, m_end): the mask bounds lo(i), hi(i)
// grow with i, so the queries that see any key of [n0, n1] are those with hi(i) >= n0 and
// lo(i) <= n1. Key tiles are launched in order (blockIdx.x ascending), so with a causal mask the
// tiles that meet the most queries start first.
#pragma once
#include "src/cuda/attention/bwd_args.hpp"
#include "src/cuda/attention/fwd_tile.cuh"

namespace attnkit::cuda::attn {

// Query tiles [m_begin, m_end) meeting key tile n (empty when m_begin >= m_end).
struct QueryRange {
  int m_begin, m_end;
  CUTE_DEVICE QueryRange(const MaskRuleT<int>& rule, int seqlen_q, int n, int block_m, int block_n) {
    const int n0 = n * block_n, n1 = min(rule.sk, n0 + block_n) - 1;
    const int diag = rule.diag_offset;
    const int q_min = rule.right < 0 ? 0 : max(0, n0 - diag - rule.right);
    const int q_max = rule.left < 0 ? seqlen_q - 1 : min(seqlen_q - 1, n1 - diag + rule.left);
    m_begin = q_min / block_m;
    m_end = q_max < q_min || n0 > n1 ? m_begin : q_max / block_m + 1;
  }
};

template <class Traits>
struct BwdTileInfo {
  int n_block, head, batch;
  SeqInfo seq;
  MaskRuleT<int> rule;
  int m_begin, m_end;
  int row_base;  // first padded row of this sequence in lse2 / delta / dq_accum

  CUTE_DEVICE explicit BwdTileInfo(const AttnBwdArgs& a)
      : n_block(blockIdx.x), head(blockIdx.y), batch(blockIdx.z), seq(a, batch) {
    rule = MaskRuleT<int>::make(a.mask, seq.seqlen_q, seq.seqlen_k);
    const QueryRange r(rule, seq.seqlen_q, n_block, Traits::kBlockM, Traits::kBlockN);
    m_begin = r.m_begin;
    m_end = skip() ? m_begin : r.m_end;
    row_base = bwd_row_base(a, batch, seq.offset_q);
  }
  // The key tile lies past the end of this (varlen) sequence: nothing to do, nothing to write.
  CUTE_DEVICE bool skip() const { return n_block * Traits::kBlockN >= seq.seqlen_k; }
  // First key tile meeting query tile m. The key tiles meeting m are contiguous (m_begin and m_end
  // grow with n; empty ranges only occur before or after all non-empty ones), and this one is
  // among them, so a binary search over [0, n_block] finds it.
  CUTE_DEVICE int first_key_tile(int m) const {
    int lo = 0, hi = n_block;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      const QueryRange r(rule, seq.seqlen_q, mid, Traits::kBlockM, Traits::kBlockN);
      if (r.m_begin < r.m_end && r.m_end > m) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }
  // Index of query tile m's fp32 blocks (lse2, delta: kBlockM floats; dq_accum: kBlockM * D).
  CUTE_DEVICE int64_t row_block(const AttnBwdArgs& a, int m) const {
    return int64_t(head) * a.rows_padded + row_base + m * Traits::kBlockM;
  }
};

}  // namespace attnkit::cuda::attn
