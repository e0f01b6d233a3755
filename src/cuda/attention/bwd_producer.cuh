// src/cuda/attention/bwd_producer.cuh — the loads of the backward kernel: the CTA's K and V tiles
// once (an elected thread of warp 2), and each query tile's Q (+ lse2) and dO (+ delta) streamed
// through two TMA pipelines (an elected thread of warp 0).
#pragma once
#include "attnkit/semantics/heads.hpp"
#include "src/cuda/attention/bwd_traits.cuh"

namespace attnkit::cuda::attn {

// kBytes of fp32 from global to shared memory, completing on `barrier` (1-D bulk copy).
CUTE_DEVICE void bulk_load_floats(const float* src, float* dst, uint64_t* barrier, int bytes) {
  SM90_BULK_COPY_G2S::copy(src, barrier, dst, bytes);
}

// K and V of this CTA's key tile, once (warp 2 of the producer warpgroup: off the Q / dO loader's
// 24 registers, which the key tile's coordinates and kv head would otherwise share with its loop's).
template <class Traits, class Variant>
CUTE_DEVICE void bwd_load_kv(const BwdParams<Traits, Variant>& params, typename Traits::SharedStorage& smem) {
  using T = Traits;
  const AttnBwdArgs& a = params.args;
  const typename Variant::template Tile<T> tile(a, params.extra);
  if (tile.skip() || tile.num_query_tiles() == 0) return;  // the consumers skip their main loop and never wait for K, V
  const int b = a.cu_seqlens_q ? 0 : tile.batch;
  const int head_kv = static_cast<int>(kv_head_of(tile.head, a.heads_q, a.heads_kv));
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});  // [N, D]
  Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutK{});  // [N, D]
  auto kv_tile = [&](auto const& tma) {  // [N, D] of this CTA's keys
    Tensor m = tma.get_tma_tensor(params.shape_k)(_, _, head_kv, b);
    return local_tile(domain_offset(make_coord(tile.seq.offset_k, _0{}), m), Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{},
                      make_coord(tile.n_block, _0{}));
  };
  Tensor gK = kv_tile(params.tma_k);
  Tensor gV = kv_tile(params.tma_v);
  auto [tKgK, tKsK] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVgV, tVsV] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV), group_modes<0, 2>(gV));
  smem.barrier_kv[0].arrive_and_expect_tx(T::kTmaBytesKV / 2);
  copy(params.tma_k.with(reinterpret_cast<uint64_t&>(smem.barrier_kv[0]), 0), tKgK, tKsK);
  smem.barrier_kv[1].arrive_and_expect_tx(T::kTmaBytesKV / 2);
  copy(params.tma_v.with(reinterpret_cast<uint64_t&>(smem.barrier_kv[1]), 0), tVgV, tVsV);
}

template <class Traits, class Variant>
CUTE_DEVICE void bwd_producer(const BwdParams<Traits, Variant>& params, typename Traits::SharedStorage& smem,
                              typename Traits::Pipeline& pipe_q, typename Traits::Pipeline& pipe_do) {
  using T = Traits;
  const AttnBwdArgs& a = params.args;
  using Tile = typename Variant::template Tile<T>;
  const Tile tile(a, params.extra);
  const int count = tile.skip() ? 0 : tile.num_query_tiles();
  auto q_tile = [](auto const& t, int m, int h) {  // the TMA view of query tile m of packed head h
    if constexpr (Tile::kPacked) return t(_, m, h);
    else return t(_, m);
  };
  if (count == 0) return;
  const int b = a.cu_seqlens_q ? 0 : tile.batch;  // varlen: windows of the packed tensors
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});      // [M, D, stage]
  Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutQ{});  // [M, D, stage]
  auto q_tiles = [&](auto const& tma, auto const& shape) {
    if constexpr (Tile::kPacked) {  // [M, D, m, h] of this sequence, from the CTA's first head
      Tensor m = tma.get_tma_tensor(shape)(_, _, _, b);  // [S, D, H]
      return local_tile(domain_offset(make_coord(tile.seq.offset_q, _0{}, tile.head), m),
                        Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{}, make_coord(_, _0{}, _));
    } else {  // [M, D, m] of this head's sequence
      Tensor m = tma.get_tma_tensor(shape)(_, _, tile.head, b);
      return local_tile(domain_offset(make_coord(tile.seq.offset_q, _0{}), m), Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{},
                        make_coord(_, _0{}));
    }
  };
  Tensor gQ = q_tiles(params.tma_q, params.shape_q);
  Tensor gdO = q_tiles(params.tma_do, params.shape_q);
  auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tdOgdO, tdOsdO] = tma_partition(params.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO), group_modes<0, 2>(gdO));

  typename T::PipelineState state = cutlass::make_producer_start_state<typename T::Pipeline>();
#pragma unroll 1  // 24 registers: unrolled copies of this loop would spill
  for (int j = 0; j < count; ++j) {
    const int m = tile.query_tile(j), h = tile.head_offset(j);
    const int64_t rows = tile.row_block(a, m, h);
    const int s = state.index();
    pipe_q.producer_acquire(state);
    copy(params.tma_q.with(*pipe_q.producer_get_barrier(state), 0), q_tile(tQgQ, m, h), tQsQ(_, s));
    bulk_load_floats(a.lse2 + rows, smem.lse2.data() + s * T::kBlockM, pipe_q.producer_get_barrier(state), T::kRowBytes);
    pipe_do.producer_acquire(state);
    copy(params.tma_do.with(*pipe_do.producer_get_barrier(state), 0), q_tile(tdOgdO, m, h), tdOsdO(_, s));
    bulk_load_floats(a.delta + rows, smem.delta.data() + s * T::kBlockM, pipe_do.producer_get_barrier(state), T::kRowBytes);
    *const_cast<volatile int*>(&smem.loads_issued) = j;  // (bwd_dq_writer.cuh: adds wait for them)
    ++state;
  }
  pipe_q.producer_tail(state);
  pipe_do.producer_tail(state);
}

}  // namespace attnkit::cuda::attn
