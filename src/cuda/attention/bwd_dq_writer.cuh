// src/cuda/attention/bwd_dq_writer.cuh — the dQ writer warp of the backward kernel (warp 1 of the
// producer warpgroup): for each query tile, in the consumers' order, waits until the consumers
// have staged its dQ partial (two staging buffers used alternately, or one), adds it into dq_accum with
// one bulk reduce-add, and frees the buffer once the add has read it (ordered: landed). The
// consumers never wait on global memory for dQ; the second buffer gives the writer a tile of slack.
//
// dq_accum is not zeroed: the first partial of each query tile (of each chain's copy) is stored,
// the others added after it has landed, and the dq postprocess skips a copy nobody wrote (its
// semaphore still 0). The ordered mode (the deterministic option: bwd_dispatch.cu) adds
// the partials of each query tile in key-tile order, within each of a.dq_chains chains (key tile n
// in chain n % chains, with its own copy of dq_accum and semaphores): a semaphore per (chain, query
// tile) counts the key tiles whose add has landed; key tile n waits for its turn (the number of key
// tiles of its chain before it that meet the tile; turn 0 stores), writes, waits for completion,
// and bumps the count with a release. The default mode takes the first write by a claim (an
// atomic count per query tile: whoever draws 0 stores, then releases the semaphore); the others
// wait for that release once, then add without ordering among themselves — unless a.dq_zeroed:
// then every partial is added into the zeroed dq_accum, by the consumers themselves
// (AttnBwdArgs::dq_direct: this warp has nothing to do).
#pragma once
#include "src/cuda/attention/bulk.cuh"
#include "src/cuda/attention/bwd_tile.cuh"  // bwd_cta_unhoisted
#include "src/cuda/attention/bwd_traits.cuh"

namespace attnkit::cuda::attn {

inline constexpr int kDqBarrierThreads = 256 + 32;

template <class Traits, class Variant>
CUTE_DEVICE void bwd_dq_writer(const BwdParams<Traits, Variant>& params, typename Traits::SharedStorage& smem) {
  using T = Traits;
  const AttnBwdArgs& a = params.args;
  const typename Variant::template Tile<T> tile(a, params.extra);
  const bool leader = cute::elect_one_sync();
  const int count = tile.skip() || (T::kDqDirect && a.dq_direct()) ? 0 : tile.num_query_tiles();  // direct: the consumers add
#pragma unroll 1
  for (int j = 0; j < count; ++j) {  // the consumers' order
    const int m = tile.query_tile(j), buf = j % T::kDqBuffers;
    cutlass::arch::NamedBarrier::sync(kDqBarrierThreads, kBarrierDqFull + buf);
    if (leader) {
      // (Recomputed per tile, not kept: this warp runs on the producer's 24 registers.)
      const int64_t rows = tile.row_block(a, m, tile.head_offset(j)) + a.chain_row0(tile.dq_chain());
      int* sem = a.dq_semaphore + rows / T::kBlockM;
      bool first = false;
      if (a.ordered_dq) {
        const int turn = tile.dq_turn(j);
        first = turn == 0;
        while (load_acquire(sem) != turn) {
        }
      } else if (!a.dq_zeroed) {  // one chain: the claims follow its semaphores
        first = atomicAdd(sem + a.chain_row0(1) / T::kBlockM, 1) == 0;
        if (!first)
          while (load_acquire(sem) == 0) {
          }
      }
      if constexpr (T::kStages == 1) {
        // One Q / dO stage (D 256): the consumers wait for the next query tile's loads, which the
        // producer issues once they free the stage, just after staging this partial. An add
        // issued before those loads holds them up behind its 64 KB and the kernel ran 1.4-1.5x
        // slower (how soon the add went depended on this warp's code layout); so the loads go
        // first. (The ordered mode waits for its turn anyway; at D <= 128 the loads are a tile
        // ahead: docs/perf/attention_bwd.md, "D256: the add must follow the loads".)
        const int next_loads = j + 1 < count ? j + 1 : count - 1;
        if (!a.ordered_dq)
          while (*const_cast<volatile int*>(&smem.loads_issued) < next_loads) {
          }
      }
      float* dst = a.dq_accum + rows * T::kHeadDim;
      const float* src = smem.dq.data() + buf * T::kDqFloats;
      if (first) bulk_store_f32(dst, src, T::kDqFloats * sizeof(float));
      else bulk_reduce_add_f32(dst, src, T::kDqFloats * sizeof(float));
      if (a.ordered_dq || first) {  // the next writer of the tile may go once this write has landed
        bulk_wait_all();
        red_release_add(sem, 1);
      } else {
        bulk_wait_read();
      }
    }
    __syncwarp();  // the whole warp reaches the named barriers together
    if (j + T::kDqBuffers < count) cutlass::arch::NamedBarrier::arrive(kDqBarrierThreads, kBarrierDqEmpty + buf);
  }
  // This key tile's dQ is all in dq_accum once the consumers' direct adds are issued (their barrier
  // arrival orders them before the count) and this warp's bulk adds have completed: count it for
  // the dq postprocess, which converts a head once all its key tiles counted. (Recomputed from the
  // parameters and blockIdx: kept across the loop, it spilled.)
  const bool count_done = a.dq_after_heads;
  if (count_done && T::kDqDirect && a.dq_direct()) cutlass::arch::NamedBarrier::sync(kDqBarrierThreads, kBarrierDqAdded);
  if (leader) {
    bulk_wait_all();  // the staging buffer must outlive the last add
    if (count_done) {
      constexpr bool kPacked = Variant::template Tile<T>::kPacked;
      const BwdCta cta = bwd_cta_unhoisted<kPacked>(a);
      fence_proxy_async_global();  // the bulk adds (async proxy) before the release (generic)
      const int heads = cta_query_heads<kPacked>(a);
      for (int h = 0; h < heads; ++h) red_release_add(a.dq_heads_done + cta.batch * a.heads_q + cta.head + h, 1);
    }
  }
}

}  // namespace attnkit::cuda::attn
