// src/cuda/attention/bwd_consumer.cuh — a consumer warpgroup of the backward kernel: its share of
// dK and dV (64 keys, or with split D all 64 keys and half the head dim; bwd_traits.cuh)
// accumulated over the query tiles in registers, dQ of each query tile computed by both warpgroups
// (head-dim halves) and handed to the dQ writer warp (bwd_dq_writer.cuh) through a shared-memory
// staging buffer (two, used alternately, when they fit) — or, at D 64 / 128 in the default mode with a
// zeroed dq_accum, added by the consumers straight from registers (AttnBwdArgs::dq_direct).
//
// Per query tile m (stage s; tiles last to first):
//   issue S^T = K Q^T, dP^T = V dO^T  ->  wait S  ->  P = exp2(S * scale * log2 e - lse2), masked
//   ->  issue dV += P^T dO (split D: store P^T into sPt instead)  ->  wait dP
//   ->  dS = P * (dP - delta) (* tanh' with softcap)  ->  store dS^T into sdS
//   ->  [barrier: sdS (and sPt) whole]  ->  (split D: issue dV += P^T dO)  ->  issue dQ = dS K,
//   dK += dS^T Q  ->  wait dQ  ->  [staging free]  dQ into the staging buffer (dK still runs)
//   ->  [staged] (direct: dQ's vector adds instead)  ->  wait dK, release Q/dO.
// Query tiles go last to first: the key tiles of a causal mask then all start on the same (last)
// query tile, so concurrent CTAs share its Q/dO in L2, and in deterministic mode (key tiles add
// in ascending order) each CTA waits only once, at its first tile, for its predecessors.
#pragma once
#include "src/cuda/attention/bulk.cuh"
#include "src/cuda/attention/bwd_epilogue.cuh"
#include "src/cuda/attention/bwd_dq_writer.cuh"
#include "src/cuda/attention/bwd_producer.cuh"
#include "src/cuda/attention/bwd_scores.cuh"
#include "src/cuda/attention/bwd_tile.cuh"  // BwdVisit
#include "src/cuda/attention/fragment.cuh"
#include "src/cuda/attention/mma.cuh"

namespace attnkit::cuda::attn {

template <class Traits, class Variant>
struct BwdConsumer {
  using T = Traits;
  using Element = typename T::Element;
  using Tile = typename Variant::template Tile<T>;
  using Probs = typename Variant::template Probs<T>;
  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmadV mma_dv;
  typename T::TiledMmadK mma_dk;
  typename T::TiledMmadQ mma_dq;
  int thread_idx;  // 0 .. 255 over both consumer warpgroups
  int wg;

  CUTE_DEVICE BwdConsumer() : thread_idx(threadIdx.x - 128), wg(__shfl_sync(0xffffffff, (threadIdx.x - 128) / 128, 0)) {}

  CUTE_DEVICE void run(const BwdParams<T, Variant>& params, typename T::SharedStorage& smem, typename T::Pipeline& pipe_q,
                       typename T::Pipeline& pipe_do) {
    const AttnBwdArgs& a = params.args;
    const Tile tile(a, params.extra);
    if (tile.skip()) return dq_adds_issued(a);
    const Probs probs(a, params.extra, tile, wg, smem.variant_ids);
    Tensor tdVrdV = partition_fragment_C(mma_dv, Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{});  // fp32 [64, D] / 128 threads
    Tensor tdKrdK = partition_fragment_C(mma_dk, Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{});
    clear(tdVrdV);
    clear(tdKrdK);

    const int count = tile.num_query_tiles();
    if (count > 0) {
      smem.barrier_kv[0].wait(0);  // K (V before the first dP^T GEMM)
      typename T::PipelineState state;  // index 0, phase 0
      QueryTileReady ready;
      // Direct dQ adds (AttnBwdArgs::dq_direct) go to query tile m's block of dq_accum, passed as
      // the head's base (kDqDirectKeepsHead: block m at + m * kDqFloats) or as the block itself.
      const bool direct = T::kDqDirect && a.dq_direct();
      float* dq_head = direct ? a.dq_accum + tile.row_block(a, 0) * T::kHeadDim : nullptr;
      for (int j = 0; j < count; ++j, ++state) {
        const BwdVisit visit = tile.visit(j);
        float* dq = T::kDqDirectKeepsHead ? packed_head(dq_head, visit.head_offset, a)
                    : direct                ? a.dq_accum + tile.row_block(a, visit.m, visit.head_offset) * T::kHeadDim
                                            : nullptr;
        query_tile(probs, smem, pipe_q, pipe_do, state, ready, j, visit, dq, tdVrdV, tdKrdK);
      }
      dq_adds_issued(a);
    } else {  // (a call in each branch is the code measured on the device; one call after the
      dq_adds_issued(a);  // branch compiles to another instruction layout, not measured)
    }

    // dK carries the score scale (S = scale * Q K^T); dV does not.
    CUTE_UNROLL
    for (int i = 0; i < size(tdKrdK); ++i) tdKrdK(i) *= a.scale;
    Tensor cKV = as_rowcol(mma_dv.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{})));  // (key, d) of each register
    store_dkv<T>(a, tile, as_rowcol(tdKrdK), cKV, a.dk, a.dk_stride, a.dk_accum);
    store_dkv<T>(a, tile, as_rowcol(tdVrdV), cKV, a.dv, a.dv_stride, a.dv_accum);
  }

  // The head's base of dq_accum (kDqDirectKeepsHead) moved to the packed head `offset` (a null base
  // stays null: the writer warp adds). Offset 0 outside the packed kernel.
  CUTE_DEVICE static float* packed_head(float* dq_head, int offset, const AttnBwdArgs& a) {
    return dq_head && offset ? dq_head + int64_t(offset) * a.rows_padded * T::kHeadDim : dq_head;
  }

  // Direct dQ adds (AttnBwdArgs::dq_direct) with the dq postprocess beside the main kernel's tail:
  // the writer warp counts this key tile's dQ for it once every consumer thread's adds are issued
  // (bwd_dq_writer.cuh). Every CTA's consumers arrive, whatever they visited.
  CUTE_DEVICE static void dq_adds_issued(const AttnBwdArgs& a) {
    if (T::kDqDirect && a.dq_direct() && a.dq_after_heads) cutlass::arch::NamedBarrier::arrive(kDqBarrierThreads, kBarrierDqAdded);
  }

  // Whether the next query tile's Q and dO have landed: probed (mbarrier test_wait, never blocks)
  // in the middle of each query tile, so the next one waits only where a buffer was not yet full
  // rather than paying a barrier round trip before its first GEMM.
  struct QueryTileReady {
    cutlass::ConsumerToken q{cutlass::BarrierStatus::WaitAgain}, dout{cutlass::BarrierStatus::WaitAgain};
  };

  // The j-th visited query tile: dV, dK += its contributions; its dQ partial added to dq_accum.
  template <class TAcc>
  CUTE_DEVICE void query_tile(const Probs& probs, typename T::SharedStorage& smem, typename T::Pipeline& pipe_q,
                              typename T::Pipeline& pipe_do, typename T::PipelineState state, QueryTileReady& ready, int j,
                              BwdVisit visit, float* dq_direct, TAcc& tdVrdV, TAcc& tdKrdK) {
    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});       // [M, D, stage]
    Tensor sdO = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutQ{});   // [M, D, stage]
    Tensor sQt = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQt{});     // [D, M, stage]
    Tensor sdOt = make_tensor(make_smem_ptr(smem.dout.data()), typename T::SmemLayoutQt{}); // [D, M, stage]
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});       // [N, D]
    Tensor sV = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutK{});       // [N, D]
    Tensor sKt = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutKt{});     // [D, N]
    Tensor sdS = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdS{});    // [M, N]
    Tensor sdSt = make_tensor(make_smem_ptr(smem.ds.data()), typename T::SmemLayoutdSt{});  // [N, M]
    Tensor sPt = make_tensor(make_smem_ptr(smem.pt.data()), typename T::SmemLayoutdSt{});   // [N, M], split D only
    auto wg_sdp = mma_sdp.get_slice(wg * 128);  // operand descriptors are per warpgroup
    auto wg_dv = mma_dv.get_slice(wg * 128);
    auto wg_dk = mma_dk.get_slice(wg * 128);
    auto wg_dq = mma_dq.get_slice(wg * 128);
    Tensor tSrK = wg_sdp.partition_fragment_A(sK);      // this warpgroup's 64 keys
    Tensor tSrQ = wg_sdp.partition_fragment_B(sQ);      // (.., stage); split D: this warpgroup's queries
    Tensor tdPrV = wg_sdp.partition_fragment_A(sV);
    Tensor tdPrdO = wg_sdp.partition_fragment_B(sdO);   // (.., stage)
    Tensor tdVrdO = wg_dv.partition_fragment_B(sdOt);   // (.., stage)
    Tensor tdKrdS = wg_dk.partition_fragment_A(sdSt);   // this warpgroup's 64 keys
    Tensor tdKrQ = wg_dk.partition_fragment_B(sQt);     // (.., stage); split D: this warpgroup's D/2
    Tensor tdQrdS = wg_dq.partition_fragment_A(sdS);
    Tensor tdQrK = wg_dq.partition_fragment_B(sKt);     // this warpgroup's D/2 columns

    const int s = state.index();
    Tensor tSrS = partition_fragment_C(mma_sdp, Shape<Int<T::kBlockN>, Int<T::kBlockM>>{});   // fp32 [64k, M] / 128 threads
    Tensor tdPrdP = partition_fragment_C(mma_sdp, Shape<Int<T::kBlockN>, Int<T::kBlockM>>{});
    pipe_q.consumer_wait(state, ready.q);
    gemm_ss_zero(mma_sdp, tSrK, tSrQ(_, _, _, s), tSrS);
    pipe_do.consumer_wait(state, ready.dout);
    if (j == 0) smem.barrier_kv[1].wait(0);  // V
    gemm_ss_zero(mma_sdp, tdPrV, tdPrdO(_, _, _, s), tdPrdP);
    const int32_t started = probs.start_tile(visit);  // (the variant's loads, while the GEMMs run)

    // (key, query) within the tile of each S register, in register order.
    Tensor cS = mma_sdp.get_thread_slice(thread_idx).partition_C(make_identity_tensor(Shape<Int<T::kBlockN>, Int<T::kBlockM>>{}));
    const float* lse2 = smem.lse2.data() + s * T::kBlockM;
    const float* delta = smem.delta.data() + s * T::kBlockM;

    warpgroup_wait<1>();  // S^T ready; dP^T may still run
    warpgroup_fence_operand(tSrS);
    Tensor tdVrP = make_tensor<Element>(acc_as_operand_a_layout(tSrS.layout()));  // P^T as the A operand of dV
    probs(tSrS, tdVrP, cS, lse2, visit, started);
    if constexpr (T::kSplitD) {
      store_pt(tdVrP, sPt, T::wg_key0(wg), T::wg_query0(wg));  // dV needs the other warpgroup's queries too
    } else {
      gemm_rs(mma_dv, tdVrP, tdVrdO(_, _, _, s), tdVrdV);
    }

    warpgroup_wait<T::kSplitD ? 0 : 1>();  // dP^T ready; dV may still run
    warpgroup_fence_operand(tdPrdP);
    store_ds<Element>(tSrS, tdPrdP, cS, delta, sdSt, T::wg_key0(wg), T::wg_query0(wg));
    cutlass::arch::fence_view_async_shared();  // dS^T (P^T) writes -> visible to WGMMA (async proxy)
    cutlass::arch::NamedBarrier::sync(256, kBarrierDsReady);
    typename T::PipelineState next = state;
    ++next;
    ready.q = pipe_q.consumer_test_wait(next);  // past the last query tile: a stage never filled, unused
    ready.dout = pipe_do.consumer_test_wait(next);

    if constexpr (T::kSplitD) {
      Tensor tdVrPt = wg_dv.partition_fragment_A(sPt);  // all 64 queries of P^T
      gemm_ss(mma_dv, tdVrPt, tdVrdO(_, _, _, s), tdVrdV);
    }
    Tensor tdQrdQ = partition_fragment_C(mma_dq, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});  // fp32 [M, D/2] / 128 threads
    gemm_ss_zero(mma_dq, tdQrdS, tdQrK, tdQrdQ);
    gemm_ss(mma_dk, tdKrdS, tdKrQ(_, _, _, s), tdKrdK);
    warpgroup_wait<1>();  // dV and dQ done; dK may still run
    warpgroup_fence_operand(tdQrdQ);
    // dq_accum's order (and the staging buffer's): float4 j of thread t at (j * 256 + t) * 4 —
    // conflict-free staging stores, whole lines for a warp's vector adds; the postprocess reads it
    // back with the same MMA partitioning.
    static_assert(decltype(size(tdQrdQ))::value % 4 == 0);
    auto quad = [&](int q) { return make_float4(tdQrdQ(4 * q), tdQrdQ(4 * q + 1), tdQrdQ(4 * q + 2), tdQrdQ(4 * q + 3)); };
    if (dq_direct) {
      float4* dst = reinterpret_cast<float4*>(T::kDqDirectKeepsHead ? dq_direct + int64_t(visit.m) * T::kDqFloats : dq_direct);
      CUTE_UNROLL
      for (int q = 0; q < size(tdQrdQ) / 4; ++q) red_add_v4_f32(reinterpret_cast<float*>(dst + q * 256 + thread_idx), quad(q));
    } else {
      const int buf = j % T::kDqBuffers;
      if (j >= T::kDqBuffers)  // the writer is done with it
        cutlass::arch::NamedBarrier::sync(kDqBarrierThreads, kBarrierDqEmpty + buf);
      float4* staging = reinterpret_cast<float4*>(smem.dq.data() + buf * T::kDqFloats);
      CUTE_UNROLL
      for (int q = 0; q < size(tdQrdQ) / 4; ++q) staging[q * 256 + thread_idx] = quad(q);
      cutlass::arch::fence_view_async_shared();  // staging writes -> visible to the bulk copy (async proxy)
      cutlass::arch::NamedBarrier::arrive(kDqBarrierThreads, kBarrierDqFull + buf);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(tdVrdV);
    warpgroup_fence_operand(tdKrdK);
    pipe_q.consumer_release(state);
    pipe_do.consumer_release(state);
  }
};

}  // namespace attnkit::cuda::attn
