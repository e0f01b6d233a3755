// src/cuda/flex/block_lists.hpp — BlockMask lists as the flex kernels read them, and the
// backward's query-side lists built from them. Plain host/device code (no CUDA types), so the CPU
// tests check the list building exhaustively (tests/cpp/flex_query_lists_test.cpp).
//
// The backward's lists come from the BlockMask's kv lists (the forward's), so the backward visits
// exactly the blocks the forward did, whatever q-side tensors came with the mask:
//  mark (per mask batch, head, query block r):  its row of a dense [nq, nk] table — 1 partial,
//           2 full (torch's lists name each block at most once) — then numbers the marked key
//           blocks: cell |= (marked key blocks before it) << 2, the turn of that key block in the
//           ordered dQ reduction of the row's query tiles.
//  gather (per mask batch, head, key block kb):  walks its column, query blocks last to first, and
//           writes the query tiles of the blocks it finds, each with its turn and a full-block
//           flag, in one of two orders:
//           - ordered (the deterministic mode): partial and full blocks alike, query tiles
//             descending, the one order the dense backward uses for every key tile. It keeps the
//             ordered dQ turns a wavefront: with partial blocks first, a causal key block's
//             diagonal tile came first in its list and last in its predecessor's, so the key
//             blocks of a head ran one after another (50x slower at S16k causal;
//             docs/perf/flex_bwd.md, "Deterministic mode");
//           - partial first (the default mode): the partial blocks' tiles, then the full ones',
//             each group descending; 2-4% faster than one descending order there (same section).
// Both are O(Bm * Hm * nq * nk), as the BlockMask itself. The two functions below are the
// one-thread reference (the CPU tests run them); the kernels (bwd_lists.cuh) compute the same
// tables a block per row and a warp per column, and flex_query_lists_gpu_test.cu checks them
// against it.
#pragma once
#include <cstdint>

#include "attnkit/config.hpp"

namespace attnkit::cuda::flex {

// One BlockMask list pair (kv_num_blocks, kv_indices) or (full_kv_num_blocks, full_kv_indices).
// Strides are in elements; a broadcast B or H dim has stride 0.
struct BlockList {
  const int32_t* num = nullptr;    // [B|1, H|1, rows]
  const int32_t* index = nullptr;  // [B|1, H|1, rows, cols]
  int64_t num_stride[3] = {};
  int64_t index_stride[4] = {};

  ATTNKIT_HD int count(int b, int h, int row) const {
    return num ? num[b * num_stride[0] + h * num_stride[1] + row * num_stride[2]] : 0;
  }
  ATTNKIT_HD const int32_t* row(int b, int h, int row) const {
    return index + b * index_stride[0] + h * index_stride[1] + row * index_stride[2];
  }
};

// Per (BlockMask batch, head, key block): the query tiles that meet it, built on the device
// (bwd_lists.cuh). B and H of size 1 broadcast.
struct QueryTileLists {
  int32_t* num = nullptr;    // [Bm, Hm, nk]: query tiles listed
  int32_t* tiles = nullptr;  // [Bm, Hm, nk, m_tiles]: entries m << 1 | full, query tile m descending
  int32_t* turns = nullptr;  // [Bm, Hm, nk, m_tiles]: key blocks before this one meeting that tile
  int bm = 1, hm = 1, nk = 0, m_tiles = 0;

  ATTNKIT_HD int64_t row(int b, int h, int kb) const {
    return (int64_t(bm == 1 ? 0 : b) * hm + (hm == 1 ? 0 : h)) * nk + kb;
  }
  ATTNKIT_HD static int32_t entry(int m, bool full) { return m << 1 | int32_t(full); }
  ATTNKIT_HD static int query_tile_of(int32_t entry) { return entry >> 1; }
  ATTNKIT_HD static bool is_full(int32_t entry) { return entry & 1; }
};

struct ListBuildArgs {
  BlockList partial, full;  // the BlockMask's kv lists (full.num null: none)
  int nq = 0;               // query blocks
  int q_sub = 1;            // query tiles per query block (block_q / 64)
  bool partial_first = true;  // the entries' order (above): false for the deterministic mode
  int32_t* cells = nullptr;  // [Bm, Hm, nq, nk] scratch
  QueryTileLists out;

  // The gather's walks down a column: partial first, pass 1 (partial blocks) then 2 (full ones);
  // else one pass 0 over every marked block.
  ATTNKIT_HD int first_pass() const { return partial_first ? 1 : 0; }
  ATTNKIT_HD int last_pass() const { return partial_first ? 2 : 0; }
  ATTNKIT_HD static bool in_pass(int32_t cell, int pass) { return pass == 0 ? (cell & 3) != 0 : (cell & 3) == pass; }
};

// Thread t of the mark step: t = (b * Hm + h) * nq + r.
ATTNKIT_HD void mark_query_block_row(const ListBuildArgs& x, int64_t t) {
  const QueryTileLists& l = x.out;
  const int r = int(t % x.nq), h = int(t / x.nq % l.hm), b = int(t / x.nq / l.hm);
  int32_t* row = x.cells + t * l.nk;
  for (int kb = 0; kb < l.nk; ++kb) row[kb] = 0;
  for (int which = 1; which <= 2; ++which) {
    const BlockList& list = which == 1 ? x.partial : x.full;
    const int n = list.count(b, h, r);
    const int32_t* idx = n > 0 ? list.row(b, h, r) : nullptr;
    for (int i = 0; i < n; ++i) {
      const int kb = idx[i * list.index_stride[3]];
      if (kb >= 0 && kb < l.nk) row[kb] = which;  // out-of-range indices name no block
    }
  }
  int before = 0;
  for (int kb = 0; kb < l.nk; ++kb)
    if (row[kb] != 0) row[kb] |= before++ << 2;
}

// Thread t of the gather step (after every row is marked): t = (b * Hm + h) * nk + kb.
ATTNKIT_HD void gather_key_block_column(const ListBuildArgs& x, int64_t t) {
  const QueryTileLists& l = x.out;
  const int kb = int(t % l.nk);
  const int64_t bh = t / l.nk;
  int32_t* tiles = l.tiles + t * l.m_tiles;
  int32_t* turns = l.turns + t * l.m_tiles;
  int n = 0;
  for (int pass = x.first_pass(); pass <= x.last_pass(); ++pass) {
    for (int r = x.nq - 1; r >= 0; --r) {
      const int32_t cell = x.cells[(bh * x.nq + r) * l.nk + kb];
      if (!ListBuildArgs::in_pass(cell, pass)) continue;
      for (int s = x.q_sub - 1; s >= 0; --s) {
        const int m = r * x.q_sub + s;
        if (m >= l.m_tiles) continue;  // the last query block may end early
        tiles[n] = QueryTileLists::entry(m, (cell & 3) == 2);
        turns[n] = cell >> 2;
        ++n;
      }
    }
  }
  l.num[t] = n;
}

}  // namespace attnkit::cuda::flex
