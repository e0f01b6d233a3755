// src/cuda/attention/bwd_ranges.hpp — which query tiles meet a key tile, and the reverse, under a
// mask rule (plain host/device code, so the CPU tests check it exhaustively).
//
// The mask bounds lo(i), hi(i) grow with i, so the queries that see some key of [n0, n1] are those
// with hi(i) >= n0 and lo(i) <= n1: one range. For the same reason the key tiles meeting a query
// tile form one range too, with empty key tiles only before or after it.
#pragma once
#include "attnkit/semantics/mask.hpp"

namespace attnkit::cuda {

// Query tiles [m_begin, m_end) meeting key tile n (empty when m_begin >= m_end).
struct QueryRange {
  int m_begin, m_end;
  ATTNKIT_HD QueryRange(const MaskRuleT<int>& rule, int seqlen_q, int n, int block_m, int block_n) {
    const int n0 = n * block_n, n1 = (rule.sk < n0 + block_n ? rule.sk : n0 + block_n) - 1;
    const int diag = rule.diag_offset;
    const int q_min = rule.right < 0 ? 0 : (n0 - diag - rule.right > 0 ? n0 - diag - rule.right : 0);
    const int q_max = rule.left < 0 ? seqlen_q - 1 : (seqlen_q - 1 < n1 - diag + rule.left ? seqlen_q - 1 : n1 - diag + rule.left);
    m_begin = q_min / block_m;
    m_end = q_max < q_min || n0 > n1 ? m_begin : q_max / block_m + 1;
  }
};

// The first key tile meeting query tile m, given that some key tile does: the first n whose last
// key reaches lo of the tile's first row (every key tile reaches it when the window is unbounded
// on the left).
ATTNKIT_HD int first_key_tile(const MaskRuleT<int>& rule, int m, int block_m, int block_n) {
  if (rule.left < 0) return 0;
  const int x = m * block_m + rule.diag_offset - rule.left;  // lo of row m * block_m, unclamped
  return x > 0 ? x / block_n : 0;
}

// Ordered dQ: how many key tiles add into query tile m before key tile n (which meets it) in n's
// chain, the key tiles n' = n (mod chains): those of [first_key_tile, n), since the key tiles
// meeting m form one range. chains = 1: every key tile before n meeting m.
ATTNKIT_HD int dq_turn_in_chain(const MaskRuleT<int>& rule, int m, int n, int block_m, int block_n, int chains) {
  return (n - first_key_tile(rule, m, block_m, block_n)) / chains;
}

}  // namespace attnkit::cuda
