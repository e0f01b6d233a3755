// src/cuda/flex/bwd_lists.cuh — the kernels that build the backward's query tile lists
// (block_lists.hpp says what they compute, and holds the one-thread reference they are checked
// against: tests/cpp/flex_query_lists_gpu_test.cu). A block per query block row, then a warp per
// key block column: one thread per row or column ran 34 + 72 us at 16 heads x 128 x 128 blocks,
// 10% of the sliding-window backward (docs/perf/flex_bwd.md, "List building").
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/flex/block_lists.hpp"
#include "src/cuda/programmatic_launch.cuh"

namespace attnkit::cuda::flex {

// (Templates on the block size: kernels defined in a header included by several translation units.)

// Block t = (b * Hm + h) * nq + r marks its row of the [nq, nk] table: zero, partial blocks 1,
// then full blocks 2 (a block in both lists ends full, as in mark_query_block_row), then numbers
// the marked cells in key order (cell |= marked cells before it << 2) with a block-wide count,
// kThreads cells at a time.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_mark_kernel(const ListBuildArgs x) {
  static_assert(kThreads % 32 == 0);
  __shared__ int warp_marks[kThreads / 32];
  allow_dependents_to_start();  // the gather, which waits for this kernel to end
  const QueryTileLists& l = x.out;
  const int64_t t = blockIdx.x;
  const int r = int(t % x.nq), h = int(t / x.nq % l.hm), b = int(t / x.nq / l.hm);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t* row = x.cells + t * l.nk;
  for (int kb = threadIdx.x; kb < l.nk; kb += kThreads) row[kb] = 0;
  __syncthreads();  // (global writes of the block are visible to it after the barrier)
  for (int which = 1; which <= 2; ++which) {
    const BlockList& list = which == 1 ? x.partial : x.full;
    const int n = list.count(b, h, r);
    const int32_t* idx = n > 0 ? list.row(b, h, r) : nullptr;
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int kb = idx[i * list.index_stride[3]];
      if (kb >= 0 && kb < l.nk) row[kb] = which;  // out-of-range indices name no block
    }
    __syncthreads();
  }
  int before = 0;  // marked cells in the chunks already numbered
  for (int base = 0; base < l.nk; base += kThreads) {
    const int kb = base + threadIdx.x;
    const int32_t cell = kb < l.nk ? row[kb] : 0;
    const unsigned marked = __ballot_sync(0xffffffffu, cell != 0);
    if (lane == 0) warp_marks[warp] = __popc(marked);
    __syncthreads();
    int rank = before + __popc(marked & ((1u << lane) - 1));
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) rank += warp_marks[w];
      before += warp_marks[w];
    }
    if (cell != 0) row[kb] = cell | (rank << 2);
    __syncthreads();  // warp_marks is rewritten by the next chunk
  }
}

// Warp t = (b * Hm + h) * nk + kb walks its column 32 query block rows at a time, last to first
// (twice with partial_first: the partial blocks, then the full ones); a lane's row gets its place
// in the list from a prefix sum of the rows' tile counts (q_sub each, fewer for a short last
// query block).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) flex_bwd_gather_kernel(const ListBuildArgs x) {
  allow_dependents_to_start();  // the backward's preprocess, which needs nothing from the lists
  wait_for_prerequisites();     // the mark kernel's table
  const QueryTileLists& l = x.out;
  const int64_t t = (blockIdx.x * int64_t(kThreads) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= int64_t(l.bm) * l.hm * l.nk) return;  // whole warps
  const int kb = int(t % l.nk);
  const int64_t bh = t / l.nk;
  int32_t* tiles = l.tiles + t * l.m_tiles;
  int32_t* turns = l.turns + t * l.m_tiles;
  int n = 0;
  for (int pass = x.first_pass(); pass <= x.last_pass(); ++pass) {
    for (int top = x.nq - 1; top >= 0; top -= 32) {
      const int r = top - lane;
      const int32_t cell = r >= 0 ? x.cells[(bh * x.nq + r) * l.nk + kb] : 0;
      const int count = ListBuildArgs::in_pass(cell, pass) ? max(0, min(x.q_sub, l.m_tiles - r * x.q_sub)) : 0;
      int upto = count;  // inclusive prefix sum over the lanes (rows top, top - 1, ...)
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= d) upto += v;
      }
      int at = n + upto - count;
      for (int s = count - 1; s >= 0; --s, ++at) {  // the row's query tiles, last to first
        tiles[at] = QueryTileLists::entry(r * x.q_sub + s, (cell & 3) == 2);
        turns[at] = cell >> 2;
      }
      n += __shfl_sync(0xffffffffu, upto, 31);
    }
  }
  if (lane == 0) l.num[t] = n;
}

// Whether build_query_tile_lists launches its kernels (not for an empty mask).
inline bool builds_lists(const ListBuildArgs& x) { return int64_t(x.out.bm) * x.out.hm * x.nq * x.out.nk > 0; }

// The two kernels on `stream`; the gather starts early (it waits for the mark kernel's table) and
// lets the next kernel start early too (AttnBwdArgs::preprocess_after_trigger).
inline cudaError_t build_query_tile_lists(const ListBuildArgs& x, cudaStream_t stream) {
  if (!builds_lists(x)) return cudaSuccess;
  const int64_t rows = int64_t(x.out.bm) * x.out.hm * x.nq, cols = int64_t(x.out.bm) * x.out.hm * x.out.nk;
  constexpr int kThreads = 128;
  flex_bwd_mark_kernel<kThreads><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x);
  const cudaError_t err = launch_after_trigger(flex_bwd_gather_kernel<kThreads>, dim3(static_cast<unsigned>((cols * 32 + kThreads - 1) / kThreads)),
                                               dim3(kThreads), 0, stream, x);
  return err != cudaSuccess ? err : cudaGetLastError();
}

}  // namespace attnkit::cuda::flex
