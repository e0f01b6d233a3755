// src/cuda/attention/launch_order.hpp — the order in which the attention kernels start their tiles:
// the forward's query tiles (persistent CTAs take tile indices in order from a counter) and the
// backward's key tiles (one CTA each, started in grid order). Plain host/device code, so the CPU
// tests check it exhaustively (tests/cpp/launch_order_test.cpp).
//
// Plain order is head-major: a head's tiles, longest first under a causal mask, all start before
// the next head's. But under a causal mask the tiles' work differs (a query tile sees more keys the
// later it is, a key tile meets fewer queries), and the longest tiles of the last heads then start
// in the last waves and run on while the other SMs idle: a tail of ~5-7% at D128 S2k / S8k causal
// (B*S = 16k), ~3% at D64, 11-14% for the forward at D256 (a 132-SM simulation of the launch
// order). Grouped order takes G heads of a sequence at a time, tile by tile across the group, so
// each group's longest tiles start first. With G tiles of one index about one wave
// (G * tiles per head <= SMs) a wave still touches no more heads' data than plain order does (the
// forward's K / V, the backward's Q, dO and dq_accum: the L2's working set). G = 1 is plain order.
#pragma once
#include <cstdint>

#include "attnkit/semantics/mask.hpp"

namespace attnkit::cuda {

// Whether the mask makes tiles see different numbers of tiles of the other side (a causal mask or a
// window; a variant may know more, e.g. flex's BlockMask lists).
inline bool mask_varies_work(const MaskOptions& mask) { return mask.causal || mask.window_left >= 0 || mask.window_right >= 0; }

// log2 G for a launch: 0 unless the tiles' work differs; else the largest G = 2^lg with
// G * tiles_per_head <= num_sms that divides the heads (every group whole).
inline int head_group_log2(bool work_differs, int64_t tiles_per_head, int heads, int num_sms) {
  if (!work_differs || tiles_per_head <= 0) return 0;
  int lg = 0;
  while ((tiles_per_head << (lg + 1)) <= num_sms && heads % (2 << lg) == 0) ++lg;
  return lg;
}

// The forward's tile index -> (query tile, head, sequence). Index = ((sequence * heads/G + group) *
// m_blocks + (m_blocks - 1 - m)) * G + head in group: the last query tile (it sees the most keys)
// first, across the group's heads.
struct FwdTileAt {
  int m_block, head, batch;
};
ATTNKIT_HD FwdTileAt fwd_tile_at(int tile, int m_blocks, int heads, int lg) {
  const int group_tiles = m_blocks << lg, groups_per_seq = heads >> lg;
  const int group = tile / group_tiles, in_group = tile - group * group_tiles;
  const int head = ((group % groups_per_seq) << lg) + (in_group & ((1 << lg) - 1));
  return {m_blocks - 1 - (in_group >> lg), head, group / groups_per_seq};
}

// log2 G with every head of a sequence in one group (the largest power of two dividing the heads).
// Flex's deterministic backward under a document mask (docs/perf/flex_bwd.md, v26): every key tile
// of a document visits the document's query tiles from its last one down, and in the ordered mode
// adds into each after the key tiles before it; started side by side (plain order puts a head's
// key tiles in one wave) they queue at the document's last query tile, the k-th waiting k steps.
// With all heads in one group a wave holds a few key tiles of each head and the later ones start
// when the earlier ones are well under way.
inline int all_heads_group_log2(int heads) {
  int lg = 0;
  while (heads > 0 && heads % (2 << lg) == 0) ++lg;
  return lg;
}

// Flex attention's forward with a BlockMask, whose rows' lengths follow no rule the launch can see
// (a document mask's saw-tooth within every document): each sequence's query tiles m >= tail head
// by head, the last first (so that concurrent CTAs share their heads' K / V in L2, as plain order
// does), then its tiles m < tail across all heads (m descending, heads fastest), so that the last
// tiles handed out are the shortest rows of every head, not one head's mix of long and short ones.
// Index within a sequence: head * (m_blocks - tail) + (m_blocks - 1 - m) for m >= tail, then
// (m_blocks - tail) * heads + (tail - 1 - m) * heads + head. tail = 0 is plain order.
ATTNKIT_HD FwdTileAt fwd_tile_at_short_tail(int tile, int m_blocks, int heads, int tail) {
  const int per_seq = m_blocks * heads, batch = tile / per_seq;
  const int body_rows = m_blocks - tail, in_seq = tile - batch * per_seq, body = body_rows * heads;
  if (in_seq < body) {
    const int head = in_seq / body_rows;
    return {m_blocks - 1 - (in_seq - head * body_rows), head, batch};
  }
  const int in_tail = in_seq - body, row = in_tail / heads;
  return {tail - 1 - row, in_tail - row * heads, batch};
}

// The short tail's length: two waves of tiles (a simulation of the dynamic scheduler over 132 SMs,
// docs/perf/flex_fwd.md v17: one wave left the documents row's last CTA 2.5% past the mean, two
// 1.1%, plain order 6.4%).
inline int short_tail_m_blocks(int m_blocks, int heads, int num_sms) {
  if (heads <= 0) return 0;
  const int rows = (2 * num_sms + heads - 1) / heads;
  return rows < m_blocks ? rows : m_blocks;
}

// The backward's grid is (key tiles * G, heads / G, sequences), x fastest in launch order, and CTA
// (x, y, z) takes key tile x / G of head y * G + x % G. A key tile starts after every lower key
// tile of its (head, sequence) (the ordered dQ adds wait only on those: no deadlock). The
// coordinates are shifts and masks of blockIdx: the kernel's 24-register roles keep the division-
// free form (a division there spilled).
struct BwdCta {
  int n_block, head, batch;
};
ATTNKIT_HD BwdCta bwd_cta_at(unsigned x, unsigned y, unsigned z, unsigned lg) {
  return {int(x >> lg), int((y << lg) + (x & ((1u << lg) - 1))), int(z)};
}
struct BwdGrid {
  unsigned x, y, z;
};
inline BwdGrid bwd_grid(int key_tiles, int heads, int sequences, int lg) {
  return {unsigned(key_tiles) << lg, unsigned(heads) >> lg, unsigned(sequences)};
}

}  // namespace attnkit::cuda
