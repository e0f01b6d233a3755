// src/cuda/flex/bwd_lists.cuh — the backward's per-key-block query tile lists, built on the device
// from the BlockMask's kv lists (the forward's), so the backward visits exactly the blocks the
// forward did, whatever q-side tensors came with the mask.
//
//  mark:    one thread per (mask batch, head, query block): marks its row of a dense
//           [nq, nk] table (1 partial, 2 full; torch's lists name each block at most once), then
//           numbers the marked key blocks: cell |= (marked key blocks before it) << 2 — the turn
//           of that key block in the ordered dQ reduction of the row's query tiles.
//  gather:  one thread per (mask batch, head, key block): walks its column, query blocks last
//           to first, and writes the query tiles of the partial blocks, then of the full ones,
//           with their turns (QueryTileLists).
// Both are O(Bm * Hm * nq * nk), as the BlockMask itself.
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/flex/bwd_variant.cuh"
#include "src/cuda/flex/fwd_variant.cuh"

namespace attnkit::cuda::flex {

struct ListBuildArgs {
  BlockList partial, full;  // the BlockMask's kv lists (full.num null: none)
  int nq = 0;               // query blocks
  int q_sub = 1;            // query tiles per query block (block_q / 64)
  int32_t* cells = nullptr;  // [Bm, Hm, nq, nk] scratch
  QueryTileLists out;
};

// (Templates on the block size: a kernel defined in a header included by several translation units.)
template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_mark_kernel(const ListBuildArgs x) {
  const QueryTileLists& l = x.out;
  const int64_t t = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (t >= int64_t(l.bm) * l.hm * x.nq) return;
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

template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_gather_kernel(const ListBuildArgs x) {
  const QueryTileLists& l = x.out;
  const int64_t t = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (t >= int64_t(l.bm) * l.hm * l.nk) return;
  const int kb = int(t % l.nk);
  const int64_t bh = t / l.nk;
  int32_t* tiles = l.tiles + t * l.m_tiles;
  int32_t* turns = l.turns + t * l.m_tiles;
  int n = 0;
  for (int which = 1; which <= 2; ++which) {
    if (which == 2) l.num_partial[t] = n;
    for (int r = x.nq - 1; r >= 0; --r) {
      const int32_t cell = x.cells[(bh * x.nq + r) * l.nk + kb];
      if ((cell & 3) != which) continue;
      for (int s = x.q_sub - 1; s >= 0; --s) {
        const int m = r * x.q_sub + s;
        if (m >= l.m_tiles) continue;  // the last query block may end early
        tiles[n] = m;
        turns[n] = cell >> 2;
        ++n;
      }
    }
  }
  l.num[t] = n;
}

inline cudaError_t build_query_tile_lists(const ListBuildArgs& x, cudaStream_t stream) {
  const int64_t rows = int64_t(x.out.bm) * x.out.hm * x.nq, cols = int64_t(x.out.bm) * x.out.hm * x.out.nk;
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kThreads = 128;
  flex_bwd_mark_kernel<kThreads><<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x);
  flex_bwd_gather_kernel<kThreads><<<static_cast<unsigned>((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(x);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::flex
