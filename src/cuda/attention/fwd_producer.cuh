// src/cuda/attention/fwd_producer.cuh — the producer warp of the forward kernel: for each tile,
// waits until the consumers are done with Q, loads Q, then streams K and V tiles (last key tile
// first) through two TMA pipelines. One elected thread issues everything.
#pragma once
#include <new>

#include "attnkit/semantics/heads.hpp"
#include "src/cuda/attention/fwd_traits.cuh"
#include "src/cuda/attention/fwd_variant.cuh"

namespace attnkit::cuda::attn {

// Loads one tile. `claim_q_buffer` waits until Q buffer q_buf may be written; it is called after
// the tile's coordinates and TMA views are set up (~1000 cycles of integer work), so that work
// overlaps the consumers' last use of the buffer rather than delaying the Q load. The tile's
// description goes to smem.tile_desc[desc_slot] before Q's full barrier is armed (its arrive
// releases it to the consumers, as smem.tile).
template <class Traits, class Variant, class Tile, class ClaimQBuffer>
CUTE_DEVICE void load_tile(const FwdParams<Traits, Variant>& params, typename Traits::SharedStorage& smem,
                           typename Traits::Pipeline& pipe_k, typename Traits::Pipeline& pipe_v,
                           typename Traits::PipelineState& state, const Tile& tile, int q_buf, int desc_slot,
                           const ClaimQBuffer& claim_q_buffer) {
  using T = Traits;
  Tensor sQ = T::smem_q(smem, q_buf);                                                  // [M, D]
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});    // [N, D, stage]
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutVt{});  // [D, N, stage]
  const AttnFwdArgs& a = params.args;
  const int b = a.cu_seqlens_q ? 0 : tile.batch;  // varlen: windows of the packed tensors
  const int head_kv = static_cast<int>(kv_head_of(tile.head, a.heads_q, a.heads_kv));
  Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q)(_, _, tile.head, b);     // [Sq, D]
  Tensor mK = params.tma_k.get_tma_tensor(params.shape_k)(_, _, head_kv, b);       // [Sk, D]
  Tensor mVt = params.tma_v.get_tma_tensor(params.shape_vt)(_, _, head_kv, b);     // [D, Sk]
  Tensor gQ = local_tile(domain_offset(make_coord(tile.seq.offset_q, _0{}), mQ), Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{},
                         make_coord(tile.m_block, _0{}));                                            // [M, D]
  Tensor gK = local_tile(domain_offset(make_coord(tile.seq.offset_k, _0{}), mK), Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{},
                         make_coord(_, _0{}));                                                       // [N, D, n]
  Tensor gVt = local_tile(domain_offset(make_coord(_0{}, tile.seq.offset_k), mVt), Shape<Int<T::kHeadDim>, Int<T::kBlockN>>{},
                          make_coord(_0{}, _));                                                      // [D, N, n]
  auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tKgK, tKsK] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVgV, tVsV] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));

  claim_q_buffer();
  if constexpr (shares_description_v<Tile>) {
    using Shared = typename Tile::Shared;
    static_assert(sizeof(Shared) <= sizeof(smem.tile_desc[0]) && alignof(Shared) <= 16);
    new (&smem.tile_desc[desc_slot]) Shared(tile);
  }
  smem.barrier_q_full[q_buf].arrive_and_expect_tx(T::kTmaBytesQ);
  copy(params.tma_q.with(reinterpret_cast<uint64_t&>(smem.barrier_q_full[q_buf]), 0), tQgQ, tQsQ);
  const int count = tile.num_key_tiles();
  for (int i = 0; i < count; ++i) {
    const int n = tile.key_tile(i);
    pipe_k.producer_acquire(state);
    copy(params.tma_k.with(*pipe_k.producer_get_barrier(state), 0), tKgK(_, n), tKsK(_, state.index()));
    pipe_v.producer_acquire(state);
    copy(params.tma_v.with(*pipe_v.producer_get_barrier(state), 0), tVgV(_, n), tVsV(_, state.index()));
    ++state;
  }
}

// The producer also runs the tile scheduler: it takes tile indices (CTA c first gets c, then the
// next value of the global counter), skips tiles past the end of short varlen sequences, and
// publishes each tile in smem.tile[buf] before that Q buffer's full barrier completes; the
// consumers read it after waiting on the barrier (the arrive releases, the wait acquires). A tile
// index past the end, published with a plain arrive, tells the consumers to stop.
// The j-th tile of a CTA uses Q buffer j % kQStages; the consumers give a buffer back once their
// last S GEMM of its tile has completed.
template <class Traits, class Variant>
CUTE_DEVICE void producer(const FwdParams<Traits, Variant>& params, typename Traits::SharedStorage& smem,
                          typename Traits::Pipeline& pipe_k, typename Traits::Pipeline& pipe_v) {
  using Tile = typename Variant::template Tile<Traits>;
  const AttnFwdArgs& a = params.args;
  typename Traits::PipelineState state = cutlass::make_producer_start_state<typename Traits::Pipeline>();
  auto next_tile = [&] { return static_cast<int>(gridDim.x) + atomicAdd(a.tile_counter, 1); };
  constexpr int kQ = Traits::kQStages;
  for (int t = blockIdx.x, j = 0;; t = next_tile(), ++j) {
    while (t < a.num_tiles && Tile(a, params.extra, t).skip()) t = next_tile();
    const int buf = j % kQ;
    auto claim_q_buffer = [&] {
      if (j >= kQ) smem.barrier_q_empty[buf].wait((j / kQ - 1) & 1);  // consumers done with tile j - kQ's Q
      *const_cast<volatile int*>(&smem.tile[buf]) = t;
    };
    if (t >= a.num_tiles) {
      claim_q_buffer();
      smem.barrier_q_full[buf].arrive();
      break;
    }
    load_tile(params, smem, pipe_k, pipe_v, state, Tile(a, params.extra, t), buf, j % (kQ + 1), claim_q_buffer);
  }
  pipe_k.producer_tail(state);
  pipe_v.producer_tail(state);
}

}  // namespace attnkit::cuda::attn
