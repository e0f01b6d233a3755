// src/cuda/gdn/bwd_dhu_ends.cuh — bwd_dhu's state warpgroup reading its start dH (dht, a segment's
// start) and writing its end (dh0, the split's slots) through shared memory in whole 16-byte pieces
// of the state's rows, where those rows are fp32, unit-stride in the value and 16-byte aligned
// (dht / dh0 [N, HV, K, V] fp32, the default layout, and the split's slots).
//
// Why: a thread's fragment holds, per 8 columns, 2 adjacent values of 2 rows. Read or written from
// the fragment directly, every warp instruction touches 8 rows' sectors by halves, ~2k LSU
// wavefronts a CTA each way; through the tile, 8x fewer. With one CTA an SM and ~7 chunks a CTA
// (the varlen case) both ends sit on the chain (ncu: 9% of the stall samples on dh0's stores, 3% on
// the exit's drain, ~6% on dht's loads; docs/perf/gdn_bwd_dhu.md, v12).
#pragma once
#include <cstdint>

#include "src/cuda/gdn/chunk_fwd_args.cuh"

namespace attnkit::cuda::gdn {

// fp32 [kRows, kBV] in shared memory, row-major, each row's 16-byte pieces permuted (piece q of row
// r at q ^ 2 (r % 4)) so that a fragment's column pairs — 8 rows x 4 pairs a warp instruction, 4
// rows a 128-byte wavefront — fall on distinct banks; a row's 8-piece groups stay whole, so 8
// threads' consecutive pieces of one row do too. Needs 8 pieces a row: kBV >= 32.
template <int kRows, int kBV>
struct DhTile {
  static_assert(kBV % 32 == 0 && kRows * kBV % 512 == 0, "8 pieces a row, whole pieces a thread");
  static constexpr int kPieces = kBV / 4;  // 16-byte pieces a row
  static constexpr int kBytes = kRows * kBV * 4;
  float* base;
  CUTE_DEVICE float* at(int r, int c) const { return base + r * kBV + ((((c >> 2) ^ (2 * (r & 3)))) << 2) + (c & 3); }
};

// Whether a state's value rows can go by 16-byte pieces: unit value stride, rows 16-byte aligned.
CUTE_DEVICE bool rows_in_pieces(const void* first, int64_t sk, int64_t sv) {
  return sv == 1 && sk % 4 == 0 && reinterpret_cast<uintptr_t>(first) % 16 == 0;
}

// The fragment's start values, element i at coordinates cdH(i) ((row, column) of the [kRows, kBV]
// block), each handed to set(i, value), from `src` (its element (0, 0); row stride sk, unit column
// stride) by row pieces through `tile`. The caller's sync (the warpgroup's named barrier) orders
// the tile's writes before its reads, and the reads before the tile's memory is used again.
template <int kRows, int kBV, class CH, class Set, class Sync>
CUTE_DEVICE void load_by_rows(const float* src, int64_t sk, const CH& cdH, Set&& set, DhTile<kRows, kBV> tile, int tid,
                              Sync&& sync) {
  using Tile = DhTile<kRows, kBV>;
  constexpr int kPerThread = kRows * Tile::kPieces / 128;
  float4 x[kPerThread];
  CUTE_UNROLL
  for (int j = 0; j < kPerThread; ++j) {  // every load in flight before the first store
    const int p = tid + 128 * j, r = p / Tile::kPieces, c = p % Tile::kPieces * 4;
    x[j] = *reinterpret_cast<const float4*>(src + r * sk + c);
  }
  CUTE_UNROLL
  for (int j = 0; j < kPerThread; ++j) {
    const int p = tid + 128 * j, r = p / Tile::kPieces, c = p % Tile::kPieces * 4;
    *reinterpret_cast<float4*>(tile.at(r, c)) = x[j];
  }
  sync();
  CUTE_UNROLL
  for (int i = 0; i < size(cdH); i += 2) {
    const float2 v = *reinterpret_cast<const float2*>(tile.at(get<0>(cdH(i)), get<1>(cdH(i))));
    set(i, v.x);
    set(i + 1, v.y);
  }
  sync();
}

// The fragment's values to `dst` (row stride sk, unit column stride) by row pieces through `tile`;
// the caller's sync as above, before the tile is written (its memory may still be read by the
// warpgroup's GEMMs) and between the writes and the reads.
template <int kRows, int kBV, class TH, class CH, class Sync>
CUTE_DEVICE void store_by_rows(float* dst, int64_t sk, const TH& tdH, const CH& cdH, DhTile<kRows, kBV> tile,
                               int tid, Sync&& sync) {
  using Tile = DhTile<kRows, kBV>;
  sync();
  CUTE_UNROLL
  for (int i = 0; i < size(tdH); i += 2)
    *reinterpret_cast<float2*>(tile.at(get<0>(cdH(i)), get<1>(cdH(i)))) = make_float2(tdH(i), tdH(i + 1));
  sync();
  CUTE_UNROLL
  for (int j = 0; j < kRows * Tile::kPieces / 128; ++j) {
    const int p = tid + 128 * j, r = p / Tile::kPieces, c = p % Tile::kPieces * 4;
    *reinterpret_cast<float4*>(dst + r * sk + c) = *reinterpret_cast<const float4*>(tile.at(r, c));
  }
}

}  // namespace attnkit::cuda::gdn
