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

// How many key tiles meet query tile m (write a dQ partial into it): those of [first_key_tile,
// last], where last is the last key tile holding keys (n * block_n < sk) whose first key is within
// reach of the tile's last row (n * block_n <= hi of its last row below seqlen_q, unclamped) — the
// QueryRange condition m >= m_begin(n) solved for n — and 0 when the tile's first row starts past
// the last key (left window) or its last row ends before the first. (For a dQ conversion by
// the last writer of each tile: docs/perf/attention_bwd.md, "Plan".)
ATTNKIT_HD int key_tiles_meeting(const MaskRuleT<int>& rule, int seqlen_q, int m, int block_m, int block_n) {
  const int n_tiles = (rule.sk + block_n - 1) / block_n;
  int last = n_tiles - 1;
  if (rule.right >= 0) {
    const int last_row = ((m + 1) * block_m < seqlen_q ? (m + 1) * block_m : seqlen_q) - 1;
    const int reach = last_row + rule.diag_offset + rule.right;  // hi of the tile's last row, unclamped
    if (reach < 0) return 0;
    last = reach / block_n < last ? reach / block_n : last;
  }
  // With a left edge, the tile's first row must still reach a key (its lo within the sequence).
  if (rule.left >= 0 && m * block_m + rule.diag_offset - rule.left > rule.sk - 1) return 0;
  const int first = first_key_tile(rule, m, block_m, block_n);
  return last >= first ? last - first + 1 : 0;
}

// Ordered dQ: how many key tiles add into query tile m before key tile n (which meets it) in n's
// chain, the key tiles n' = n (mod chains): those of [first_key_tile, n), since the key tiles
// meeting m form one range. chains = 1: every key tile before n meeting m.
ATTNKIT_HD int dq_turn_in_chain(const MaskRuleT<int>& rule, int m, int n, int block_m, int block_n, int chains) {
  return (n - first_key_tile(rule, m, block_m, block_n)) / chains;
}

// The mask rule from one score (key, row) of a fragment: the score (key + dk, row + dc), dk, dc >= 0
// small offsets, is visible iff dk < kmax and dlo <= dc - dk <= dhi. For keys >= 0, key <= hi(row)
// and key >= lo(row) (both clamped: mask.hpp) say key < sk, dc - dk >= key - row - diag - right
// (with a right edge) and dc - dk <= key - row - diag + left (with a left edge); a missing edge's
// bound is kFar. Bounds clamped to +-kFar, past any tile's offsets, so they stay in 32 bits. The
// backward's masked tiles test each score against them (bwd_scores.cuh): one compare of a constant
// a score, where lo and hi with their clamps cost ~20 instructions.
struct ScoreBounds {
  static constexpr int kFar = 1 << 20;
  int kmax, dlo, dhi;
};
ATTNKIT_HD ScoreBounds score_bounds(const MaskRuleT<int>& rule, int64_t key, int64_t row) {
  auto clamp = [](int64_t v) { return static_cast<int>(v < -ScoreBounds::kFar ? -ScoreBounds::kFar : v > ScoreBounds::kFar ? ScoreBounds::kFar : v); };
  const int64_t to_diag = key - row - rule.diag_offset;
  return {clamp(rule.sk - key), rule.right < 0 ? -ScoreBounds::kFar : clamp(to_diag - rule.right),
          rule.left < 0 ? ScoreBounds::kFar : clamp(to_diag + rule.left)};
}

}  // namespace attnkit::cuda
