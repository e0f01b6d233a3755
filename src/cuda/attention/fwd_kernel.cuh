// src/cuda/attention/fwd_kernel.cuh — softmax attention forward on Hopper.
//
// Grid: (query tiles, query heads, batch); a CTA computes O and LSE of one 128-row query tile.
// Warpgroup 0 (producer, registers given away): one thread loads Q once, then K and V tiles
// through two TMA pipelines of kStages buffers, last key tile first.
// Warpgroups 1..2 (consumers, 64 rows each): per key tile n,
//     S_n = Q K_n^T (issued)  ->  O += P_{n+1} V_{n+1} (issued)  ->  wait S_n  ->  mask + online
//     softmax of S_n while the P.V WGMMA runs  ->  wait P.V  ->  rescale O, P_n = bf16(S_n)
// so the exponentials of one tile overlap the tensor-core work of the previous one. The two
// consumers also take turns issuing their WGMMAs (named barriers, "ping-pong"), so one warpgroup's
// softmax runs while the other's GEMMs occupy the tensor cores.
// Epilogue: O / rowsum written straight from registers, LSE by the thread owning column 0.
#pragma once
#include <cutlass/arch/reg_reconfig.h>

#include "attnkit/semantics/heads.hpp"
#include "src/cuda/attention/fwd_args.hpp"
#include "src/cuda/attention/fwd_traits.cuh"
#include "src/cuda/attention/mma.cuh"
#include "src/cuda/attention/softmax.cuh"

namespace attnkit::cuda::attn {

template <class Traits>
struct FwdParams {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaK tma_k;
  typename Traits::TmaV tma_v;
  typename Traits::ShapeQKV shape_q, shape_k, shape_vt;
  AttnFwdArgs args;
};

// Where the (batch, query tile) sits: packed offsets for varlen, plain lengths otherwise.
struct SeqInfo {
  int offset_q, seqlen_q, offset_k, seqlen_k;
  CUTE_DEVICE SeqInfo(const AttnFwdArgs& a, int b) {
    if (a.cu_seqlens_q) {
      offset_q = a.cu_seqlens_q[b];
      seqlen_q = a.cu_seqlens_q[b + 1] - offset_q;
      offset_k = a.cu_seqlens_k[b];
      seqlen_k = a.cu_seqlens_k[b + 1] - offset_k;
    } else {
      offset_q = offset_k = 0;
      seqlen_q = a.seqlen_q;
      seqlen_k = a.seqlen_k;
    }
  }
};

// Key tiles [n_begin, n_end) that any row of query tile m can see.
template <int kBlockM, int kBlockN>
CUTE_DEVICE void key_tile_range(const MaskRuleT<int>& rule, int m_block, int seqlen_q, int& n_begin, int& n_end) {
  const int row_first = m_block * kBlockM;
  const int row_last = min(seqlen_q, row_first + kBlockM) - 1;
  const int lo = rule.lo(row_first), hi = rule.hi(row_last);
  if (hi < lo || hi < 0) {
    n_begin = n_end = 0;
    return;
  }
  n_begin = lo / kBlockN;
  n_end = hi / kBlockN + 1;
}

// Everything a role needs to know about its CTA's tile. Each role derives it after the register
// split, so nothing computed before it has to stay live across setmaxnreg.
template <class Traits>
struct TileInfo {
  int m_block, head, batch;
  SeqInfo seq;
  MaskRuleT<int> rule;
  int n_begin, n_end;  // key tiles to visit
  CUTE_DEVICE explicit TileInfo(const AttnFwdArgs& a)
      : m_block(gridDim.x - 1 - blockIdx.x), head(blockIdx.y), batch(blockIdx.z), seq(a, batch) {
    // Longest query tiles first (m reversed): with a causal mask the last tiles see the most keys.
    rule = MaskRuleT<int>::make(a.mask, seq.seqlen_q, seq.seqlen_k);
    n_begin = n_end = 0;
    if (!empty()) key_tile_range<Traits::kBlockM, Traits::kBlockN>(rule, m_block, seq.seqlen_q, n_begin, n_end);
  }
  // This varlen sequence is shorter than the grid's longest one.
  CUTE_DEVICE bool empty() const { return m_block * Traits::kBlockM >= seq.seqlen_q; }
};

// The K or V pipeline as seen by one role. The barriers are initialised once before the roles split
// (init_pipelines); each role builds its own handle so no pipeline state lives across setmaxnreg.
template <class Traits, bool kInitBarriers = false>
CUTE_DEVICE typename Traits::Pipeline make_pipeline(typename Traits::Pipeline::SharedStorage& storage, bool producer) {
  typename Traits::Pipeline::Params pp;
  pp.role = producer ? Traits::Pipeline::ThreadCategory::Producer : Traits::Pipeline::ThreadCategory::Consumer;
  pp.is_leader = threadIdx.x == 0;
  pp.num_consumers = 128 * Traits::kConsumerWGs;
  pp.transaction_bytes = Traits::kTmaBytesKV;
  return typename Traits::Pipeline(storage, pp, Shape<_1, _1, _1>{}, cute::bool_constant<kInitBarriers>{});
}

template <class Traits>
CUTE_DEVICE void producer(const FwdParams<Traits>& params, typename Traits::SharedStorage& smem) {
  using T = Traits;
  auto pipe_k = make_pipeline<T>(smem.pipeline_k, true);
  auto pipe_v = make_pipeline<T>(smem.pipeline_v, true);
  const TileInfo<T> tile(params.args);
  if (tile.empty()) return;
  const int m_block = tile.m_block, head = tile.head, batch = tile.batch, n_begin = tile.n_begin, n_end = tile.n_end;
  const SeqInfo& seq = tile.seq;
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});    // [M, D]
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});    // [N, D, stage]
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutVt{});  // [D, N, stage]
  const bool varlen = params.args.cu_seqlens_q != nullptr;
  const int head_kv = static_cast<int>(kv_head_of(head, params.args.heads_q, params.args.heads_kv));
  // Global tiles; varlen sequences are windows of the packed tensors (batch index 0).
  Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q)(_, _, head, varlen ? 0 : batch);       // [Sq, D]
  Tensor mK = params.tma_k.get_tma_tensor(params.shape_k)(_, _, head_kv, varlen ? 0 : batch);    // [Sk, D]
  Tensor mVt = params.tma_v.get_tma_tensor(params.shape_vt)(_, _, head_kv, varlen ? 0 : batch);  // [D, Sk]
  Tensor gQ = local_tile(domain_offset(make_coord(seq.offset_q, _0{}), mQ), Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{},
                         make_coord(m_block, _0{}));                                                  // [M, D]
  Tensor gK = local_tile(domain_offset(make_coord(seq.offset_k, _0{}), mK), Shape<Int<T::kBlockN>, Int<T::kHeadDim>>{},
                         make_coord(_, _0{}));                                                        // [N, D, n]
  Tensor gVt = local_tile(domain_offset(make_coord(_0{}, seq.offset_k), mVt), Shape<Int<T::kHeadDim>, Int<T::kBlockN>>{},
                          make_coord(_0{}, _));                                                       // [D, N, n]
  auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tKgK, tKsK] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVgV, tVsV] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));

  smem.barrier_q.arrive_and_expect_tx(T::kTmaBytesQ);
  copy(params.tma_q.with(reinterpret_cast<uint64_t&>(smem.barrier_q), 0), tQgQ, tQsQ);
  typename T::PipelineState state = cutlass::make_producer_start_state<typename T::Pipeline>();
  for (int n = n_end - 1; n >= n_begin; --n) {
    pipe_k.producer_acquire(state);
    copy(params.tma_k.with(*pipe_k.producer_get_barrier(state), 0), tKgK(_, n), tKsK(_, state.index()));
    pipe_v.producer_acquire(state);
    copy(params.tma_v.with(*pipe_v.producer_get_barrier(state), 0), tVgV(_, n), tVsV(_, state.index()));
    ++state;
  }
  pipe_k.producer_tail(state);
  pipe_v.producer_tail(state);
}

// Writes this thread's rows of O (already normalised, in Element) and LSE.
// The tile's coordinates are re-derived here rather than kept live through the main loop (they
// would only occupy registers the loop needs).
template <class Traits, class TensorO, class TensorC, int kRows>
CUTE_DEVICE void store_output(const AttnFwdArgs& a, TensorO const& o_rc, TensorC const& coord_rc, const float (&lse)[kRows]) {
  using Element = typename Traits::Element;
  const int m_block = gridDim.x - 1 - blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const SeqInfo seq(a, batch);
  const bool varlen = a.cu_seqlens_q != nullptr;
  Element* out = static_cast<Element*>(a.out) + (varlen ? 0 : batch * a.o_stride[0]) +
                 static_cast<int64_t>(seq.offset_q) * a.o_stride[1] + head * a.o_stride[2];
  CUTE_UNROLL
  for (int mi = 0; mi < size<0>(o_rc); ++mi) {
    const int row = m_block * Traits::kBlockM + get<0>(coord_rc(mi, 0));
    if (row >= seq.seqlen_q) continue;
    Element* orow = out + static_cast<int64_t>(row) * a.o_stride[1];
    CUTE_UNROLL
    for (int ni = 0; ni < size<1>(o_rc); ni += 2) {  // columns (c, c + 1) are adjacent registers
      const int col = get<1>(coord_rc(mi, ni));
      cutlass::Array<Element, 2> pair;
      pair[0] = o_rc(mi, ni);
      pair[1] = o_rc(mi, ni + 1);
      *reinterpret_cast<cutlass::Array<Element, 2>*>(orow + col) = pair;
    }
    if (a.lse && get<1>(coord_rc(mi, 0)) == 0) {
      const int64_t off = (varlen ? 0 : batch * a.lse_stride[0]) + head * a.lse_stride[1] +
                          static_cast<int64_t>(seq.offset_q + row) * a.lse_stride[2];
      a.lse[off] = lse[mi];
    }
  }
}

// Ping-pong between consumer warpgroups: warpgroup w waits for its turn before issuing WGMMAs
// and hands the turn to the other one right after. Barrier ids 1..2 (0 is __syncthreads).
struct IssueTurns {
  int wg;  // 0 or 1
  CUTE_DEVICE void wait() const { cutlass::arch::NamedBarrier::sync(256, 1 + wg); }
  CUTE_DEVICE void pass() const { cutlass::arch::NamedBarrier::arrive(256, 1 + (1 - wg)); }
  CUTE_DEVICE void start() const {  // warpgroup 0 goes first
    if (wg == 0) cutlass::arch::NamedBarrier::arrive(256, 1);
  }
};

template <class Traits>
CUTE_DEVICE void consumer(const FwdParams<Traits>& params, typename Traits::SharedStorage& smem) {
  using T = Traits;
  auto pipe_k = make_pipeline<T>(smem.pipeline_k, false);
  auto pipe_v = make_pipeline<T>(smem.pipeline_v, false);
  const TileInfo<T> tile(params.args);
  if (tile.empty()) return;
  const int m_block = tile.m_block, n_begin = tile.n_begin, n_end = tile.n_end;
  const MaskRuleT<int>& rule = tile.rule;
  const SeqInfo& seq = tile.seq;
  using Element = typename T::Element;
  const AttnFwdArgs& a = params.args;
  const int thread_idx = threadIdx.x - 128;  // 0 .. 128 * kConsumerWGs - 1
  const int wg = __shfl_sync(0xffffffff, thread_idx / 128, 0);
  Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), typename T::SmemLayoutQ{});    // [M, D]
  Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), typename T::SmemLayoutK{});    // [N, D, stage]
  Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), typename T::SmemLayoutVt{});  // [D, N, stage]

  typename T::TiledMmaQK mma_qk;
  typename T::TiledMmaPV mma_pv;
  auto wg_qk = mma_qk.get_slice(wg * 128);  // operand descriptors are per warpgroup
  auto wg_pv = mma_pv.get_slice(wg * 128);
  Tensor tSrQ = wg_qk.partition_fragment_A(sQ);   // descriptors of this warpgroup's 64 rows
  Tensor tSrK = wg_qk.partition_fragment_B(sK);   // (.., stage)
  Tensor tOrV = wg_pv.partition_fragment_B(sVt);  // (.., stage)
  Tensor tOrO = partition_fragment_C(mma_pv, Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{});  // fp32 [64 x D] / 128 threads
  auto thr_qk = mma_qk.get_thread_slice(thread_idx);
  auto thr_pv = mma_pv.get_thread_slice(thread_idx);
  Tensor cS = as_rowcol(thr_qk.partition_C(make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kBlockN>>{})));  // (row, col) coords
  Tensor cO = as_rowcol(thr_pv.partition_C(make_identity_tensor(Shape<Int<T::kBlockM>, Int<T::kHeadDim>>{})));
  constexpr int kRows = decltype(size<0>(cS))::value;

  const bool softcap = a.softcap > 0.f;
  OnlineSoftmax<kRows> softmax(softcap ? float(M_LOG2E) : a.scale * float(M_LOG2E));
  const float softcap_in = softcap ? a.scale / a.softcap : 0.f;
  // A key tile needs per-element masking unless all of it is visible to all 64 rows of this
  // warpgroup (the common case away from the diagonal and the sequence end).
  const int wg_row_first = m_block * T::kBlockM + wg * 64, wg_row_last = wg_row_first + 63;
  auto needs_mask = [&](int n) {
    const int c0 = n * T::kBlockN, c1 = c0 + T::kBlockN - 1;
    return c1 >= seq.seqlen_k || rule.lo(wg_row_last) > c0 || rule.hi(wg_row_first) < c1;
  };

  static_assert(T::kConsumerWGs == 2, "ping-pong pairs two consumer warpgroups");
  const IssueTurns turns{wg};
  turns.start();
  clear(tOrO);
  typename T::PipelineState state;  // consumer start state: index 0, phase 0
  float corr[kRows];
  smem.barrier_q.wait(0);
  int n = n_end - 1;
  Tensor tSrS = partition_fragment_C(mma_qk, Shape<Int<T::kBlockM>, Int<T::kBlockN>>{});  // fp32 [64 x BN] / 128
  auto scores_to_probs = [&](int n) {
    Tensor s_rc = as_rowcol(tSrS);
    if (softcap) apply_softcap(s_rc, softcap_in, a.softcap);
    if (needs_mask(n)) apply_mask(s_rc, cS, rule, m_block * T::kBlockM, n * T::kBlockN);
    softmax.step(s_rc, corr);
  };
  // P of the tile in flight, as the A operand of the P.V WGMMA.
  Tensor tOrP = make_tensor<Element>(acc_as_operand_a_layout(tSrS.layout()));
  if (n >= n_begin) {
    pipe_k.consumer_wait(state);
    turns.wait();
    gemm_ss_zero(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
    turns.pass();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tSrS);
    pipe_k.consumer_release(state);
    scores_to_probs(n);
    convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);
    for (--n; n >= n_begin; --n) {
      typename T::PipelineState state_v = state;  // V of the previous tile
      ++state;
      pipe_k.consumer_wait(state);
      pipe_v.consumer_wait(state_v);
      turns.wait();
      gemm_ss_zero(mma_qk, tSrQ, tSrK(_, _, _, state.index()), tSrS);
      gemm_rs(mma_pv, tOrP, tOrV(_, _, _, state_v.index()), tOrO);
      turns.pass();
      warpgroup_wait<1>();  // S_n ready; P.V still running
      warpgroup_fence_operand(tSrS);
      pipe_k.consumer_release(state);
      scores_to_probs(n);
      warpgroup_wait<0>();
      warpgroup_fence_operand(tOrO);
      pipe_v.consumer_release(state_v);
      Tensor o_rc = as_rowcol(tOrO);
      rescale_rows(o_rc, corr);
      convert_into(make_tensor(tSrS.data(), tOrP.layout()), tOrP);
    }
    pipe_v.consumer_wait(state);
    turns.wait();
    gemm_rs(mma_pv, tOrP, tOrV(_, _, _, state.index()), tOrO);
    turns.pass();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    pipe_v.consumer_release(state);
  }
  float inv_sum[kRows], lse[kRows];
  softmax.finalize(inv_sum, lse, softcap ? 1.f : a.scale);
  Tensor o_rc = as_rowcol(tOrO);
  rescale_rows(o_rc, inv_sum);
  Tensor tOrO_out = make_tensor<Element>(tOrO.layout());
  convert_into(tOrO, tOrO_out);
  store_output<T>(a, as_rowcol(tOrO_out), cO, lse);
}

template <class Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1) attention_fwd_kernel(CUTE_GRID_CONSTANT const FwdParams<Traits> params) {
  using T = Traits;
  extern __shared__ char smem_raw[];
  auto& smem = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  const int warp = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
  const int wg = warp / 4;
  if (warp == 0 && cute::elect_one_sync()) {
    cute::prefetch_tma_descriptor(params.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(params.tma_v.get_tma_descriptor());
    smem.barrier_q.init(1);
  }
  make_pipeline<T, true>(smem.pipeline_k, wg == 0);  // initialises the K and V barriers
  make_pipeline<T, true>(smem.pipeline_v, wg == 0);
  __syncthreads();

  if (wg == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegs>();
    if (warp == 0 && cute::elect_one_sync())
      producer<T>(params, smem);
  } else {
    cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegs>();
    consumer<T>(params, smem);
  }
}

}  // namespace attnkit::cuda::attn
