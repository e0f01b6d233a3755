// src/cuda/attention/fwd_consumer.cuh — a consumer warpgroup of the forward kernel: 64 query rows
// of each tile against all its key tiles, then the epilogue.
//
// Per key tile n (last first):   wait K_n, V_{n+1}  ->  [turn]  issue S_n = Q K_n^T and
// O += P_{n+1} V_{n+1}  ->  [pass turn]  wait S_n  ->  mask + online softmax of S_n while P.V runs,
// probe the next K and V  ->  wait P.V, rescale O, P_n = bf16(S_n). The turn (IssueTurns)
// alternates the two consumer warpgroups so one's softmax overlaps the other's WGMMAs.
#pragma once
#include <new>

#include "src/cuda/attention/fwd_epilogue.cuh"
#include "src/cuda/attention/fwd_producer.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/attention/fwd_variant.cuh"

namespace attnkit::cuda::attn {

// Barrier ids 1..2 (0 is __syncthreads): warpgroup w waits on 1 + w for its turn to issue WGMMAs
// and passes the turn to the other right after issuing. Two encodings of the same barriers:
// kImmediateIds (D128, D256) issues immediate ids under a predicate, because ids computed from w
// stayed in registers across the main loop and the flex catalog's instantiations spilled them;
// D64 computes them from w, which measured 5-8% faster there (docs/perf/attention_fwd.md, v9).
template <bool kImmediateIds>
struct IssueTurns {
  int wg;  // 0 or 1
  CUTE_DEVICE void wait() const {
    if constexpr (kImmediateIds) {
      if (wg == 0) cutlass::arch::NamedBarrier::sync(256, 1);
      else cutlass::arch::NamedBarrier::sync(256, 2);
    } else {
      cutlass::arch::NamedBarrier::sync(256, 1 + wg);
    }
  }
  CUTE_DEVICE void pass() const {
    if constexpr (kImmediateIds) {
      if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, 2);
      else cutlass::arch::NamedBarrier::arrive(256, 1);
    } else {
      cutlass::arch::NamedBarrier::arrive(256, 1 + (1 - wg));
    }
  }
  CUTE_DEVICE void start() const {  // warpgroup 0 goes first, once per kernel
    if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, 1);
  }
};

// Q's rows of warpgroup wg (64 x D of the [kBlockM, D] tile in buffer q_buf) times q_factor, -1 or 0
// (a caller's scale <= 0: fold_scale_sign_into_q), in place, before the warpgroup's first S GEMM of
// the tile reads them: each 16-bit element's sign flipped, or every bit cleared. By 16-byte pieces
// (the swizzle moves 16-byte units: 8 elements of a row from a multiple of 8 stay adjacent). The
// generic-proxy writes are then fenced for WGMMA (async proxy) and the warpgroup's threads meet on
// barrier 3 + wg (flex's scratch passes use it the same way; immediate ids, as IssueTurns says why).
template <class T>
CUTE_DEVICE void scale_q_rows(typename T::SharedStorage& smem, int q_buf, int wg, float q_factor) {
  static_assert(sizeof(typename T::Element) == 2);
  Tensor sQ = local_tile(T::smem_q(smem, q_buf), Shape<_64, Int<T::kHeadDim>>{}, make_coord(wg, 0));  // [64, D]
  constexpr int kPiecesPerRow = T::kHeadDim / 8;
  const uint32_t keep = q_factor == 0.f ? 0u : 0xffffffffu;
  const uint32_t sign = q_factor < 0.f ? 0x80008000u : 0u;
  for (int i = threadIdx.x % 128; i < 64 * kPiecesPerRow; i += 128) {
    const uint32_t addr = cast_smem_ptr_to_uint(&sQ(i / kPiecesPerRow, i % kPiecesPerRow * 8));
    uint32_t x[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3]) : "r"(addr));
    for (uint32_t& w : x) w = (w & keep) ^ sign;
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]));
  }
  cutlass::arch::fence_view_async_shared();
  if (wg == 0) cutlass::arch::NamedBarrier::sync(128, 3);
  else cutlass::arch::NamedBarrier::sync(128, 4);
}

template <class Traits, class Variant>
struct Consumer {
  using T = Traits;
  using Tile = typename Variant::template Tile<Traits>;
  using Scores = typename Variant::template Scores<Traits>;
  using Element = typename T::Element;
  using Turns = IssueTurns<(T::kHeadDim > 64)>;
  typename T::TiledMmaQK mma_qk;
  typename T::TiledMmaPV mma_pv;
  int thread_idx;  // 0 .. 255 over both consumer warpgroups
  int wg;

  CUTE_DEVICE Consumer() : thread_idx(threadIdx.x - 128), wg(__shfl_sync(0xffffffff, (threadIdx.x - 128) / 128, 0)) {}

  CUTE_DEVICE void run(const FwdParams<T, Variant>& params, typename T::SharedStorage& smem, typename T::Pipeline& pipe_k,
                       typename T::Pipeline& pipe_v) {
    const Turns turns{wg};
    turns.start();
    typename T::PipelineState state;  // index 0, phase 0
    for (int j = 0;; ++j) {  // the j-th tile of this CTA, in Q buffer j % kQStages
      const int buf = j % T::kQStages;
      smem.barrier_q_full[buf].wait((j / T::kQStages) & 1);  // Q landed, or the end was published
      const int t = *const_cast<volatile int*>(&smem.tile[buf]);
      if (t >= params.args.num_tiles) break;
      mainloop_and_epilogue(params, smem, pipe_k, pipe_v, state, turns, t, buf, j % (T::kQStages + 1));
    }
  }

  CUTE_DEVICE void mainloop_and_epilogue(const FwdParams<T, Variant>& params, typename T::SharedStorage& smem, typename T::Pipeline& pipe_k,
                                         typename T::Pipeline& pipe_v, typename T::PipelineState& state,
                                         const Turns& turns, int t, int q_buf, int desc_slot) {
    const AttnFwdArgs& a = params.args;
    if (a.q_factor != 1.f) scale_q_rows<T>(smem, q_buf, wg, a.q_factor);  // a scale <= 0 (rare)
    // The tile's description: the producer's copy (fwd_traits.cuh, tile_desc) where the variant
    // shares it, else derived from t. Taken at the start and again for the epilogue rather than
    // kept in registers through the main loop. Deriving it put ~500 cycles of integer work before
    // each tile's first GEMM (docs/perf/attention_fwd.md, v16).
    auto describe = [&]() __attribute__((always_inline)) {
      if constexpr (shares_description_v<Tile>)
        return Tile(*std::launder(reinterpret_cast<const typename Tile::Shared*>(&smem.tile_desc[desc_slot])), params.extra);
      else
        return Tile(a, params.extra, t);
    };
    const Tile tile = describe();
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});    // [N, D, stage]
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutVt{});  // [D, N, stage]
    auto wg_qk = mma_qk.get_slice(wg * 128);  // operand descriptors are per warpgroup
    auto wg_pv = mma_pv.get_slice(wg * 128);
    // Descriptors of this warpgroup's 64 rows of Q, derived again for every S GEMM from an opaque
    // copy of the buffer index: held across the main loop (16 x 64 bits at D256) ptxas spilled
    // them; deriving them is a few uniform integer ops.
    auto q_operand = [&]() __attribute__((always_inline)) {
      int b = q_buf;
      asm volatile("mov.b32 %0, %0;" : "+r"(b));
      return wg_qk.partition_fragment_A(T::smem_q(smem, b));
    };
    Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (.., stage)
    Tensor tOrV = wg_pv.partition_fragment_B(sVt);  // (.., stage)
    Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});  // fp32 [64, D] / 128 threads
    Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<T::kBlockM>, Int<T::kBlockN>>{});  // fp32 [64, BN] / 128 threads
    Tensor tOrP = make_tensor<Element>(acc_as_operand_a_layout(tSrS.layout()));              // P as the A operand of P.V
    Tensor cS = as_rowcol(mma_qk.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kBlockN>>{})));  // (row, col) of each S register
    constexpr int kRows = decltype(size<0>(cS))::value;

    const Scores scores(a, params.extra, tile, wg, smem.scratch[wg]);
    OnlineSoftmax<kRows> softmax(scores.scale_log2());
    float corr[kRows];
    // The i-th visited key tile's scores -> probabilities. Force-inlined: an outlined call would
    // pass the register tiles through the stack (local memory).
    auto scores_to_probs = [&](int i) __attribute__((always_inline)) {
      Tensor s_rc = as_rowcol(tSrS);
      scores.apply(s_rc, cS, i, tile.key_tile(i));
      softmax.step(s_rc, corr);
    };

    // Q is read by the S GEMMs only: the buffer goes back to the producer as soon as the last one
    // has completed, so the next tile's Q loads during this tile's last softmax, last P.V and
    // epilogue (at D128 there is one Q buffer; its load was the first thing each tile waited for).
    auto release_q = [&]() __attribute__((always_inline)) { smem.barrier_q_empty[q_buf].arrive(); };
    float inv_sum[kRows], lse[kRows];

    clear(tOrO);
    const int count = tile.num_key_tiles();
    if (count > 0) {
      pipe_k.consumer_wait(state);
      turns.wait();
      gemm_ss_zero(mma_qk, q_operand(), tSrK(_, _, _, state.index()), tSrS);
      turns.pass();
      warpgroup_wait<0>();
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(state);
      if (count == 1) release_q();
      scores_to_probs(0);
      convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);
      // Whether the next iteration's K and V have landed, probed (mbarrier test_wait, which never
      // blocks) at the end of each softmax: the probe's latency hides behind the softmax, and the
      // next iteration waits only where its buffer was not yet full. Waiting at the top of the
      // iteration put two barrier round trips on each warpgroup's path to its next turn.
      cutlass::ConsumerToken k_full{cutlass::BarrierStatus::WaitAgain}, v_full{cutlass::BarrierStatus::WaitAgain};
      for (int i = 1; i < count; ++i) {
        typename T::PipelineState state_v = state;  // V of the previous key tile
        ++state;
        pipe_k.consumer_wait(state, k_full);
        pipe_v.consumer_wait(state_v, v_full);
        turns.wait();
        gemm_ss_zero(mma_qk, q_operand(), tSrK(_, _, _, state.index()), tSrS);
        gemm_rs(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
        turns.pass();
        warpgroup_wait<1>();  // S_n ready; P.V still running
        warpgroup_fence_operand(tSrS);
        pipe_k.consumer_release(state);
        if (i == count - 1) release_q();
        scores_to_probs(i);
        typename T::PipelineState next = state;
        ++next;
        k_full = pipe_k.consumer_test_wait(next);  // K of the next key tile (the next tile's, after the last)
        v_full = pipe_v.consumer_test_wait(state);
        warpgroup_wait<0>();
        warpgroup_fence_operand(tOrO);
        pipe_v.consumer_release(state_v);
        Tensor o_rc = as_rowcol(tOrO);
        rescale_rows(o_rc, corr);
        convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);
      }
      pipe_v.consumer_wait(state, v_full);
      turns.wait();
      gemm_rs(mma_pv, tOrP, tOrV(_, _, _, state.index()), tOrO);
      turns.pass();
      softmax.finalize(inv_sum, lse, scores.lse_scale());  // while the last P.V runs
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      pipe_v.consumer_release(state);
      ++state;
    } else {
      release_q();
      softmax.finalize(inv_sum, lse, scores.lse_scale());
    }
    Tensor o_rc = as_rowcol(tOrO);
    rescale_rows(o_rc, inv_sum);
    Tensor cO = as_rowcol(mma_pv.get_thread_slice(thread_idx).partition_C(
        make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{})));
    Variant::template Epilogue<T>::store(a, params.extra, describe(), o_rc, cO, lse);
  }
};

}  // namespace attnkit::cuda::attn
