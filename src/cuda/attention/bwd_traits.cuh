// src/cuda/attention/bwd_traits.cuh — compile-time shape of the backward kernel for one
// (element type, head dim): tiles, warp roles, shared-memory layouts, TMA and WGMMA types.
//
// A CTA owns a key tile of kBlockN keys of one (query head, sequence) and streams the query tiles
// (kBlockM = 64 rows) that see it. Warpgroup 0 is the producer; the two consumer warpgroups split
// the work one of two ways.
//
// D <= 128 (kBlockN = 128): consumer warpgroup w owns keys [64w, 64w + 64) for the transposed
// products and dK/dV, and head-dim columns [wD/2, (w+1)D/2) for dQ:
//   S^T [64k, M]   = K_w [64k, D] . Q^T           SS, both K-major
//   dP^T [64k, M]  = V_w [64k, D] . dO^T          SS, both K-major
//   dV_w [64k, D] += P^T [64k, M] . dO [M, D]     RS, dO read MN-major (its transposed view)
//   dK_w [64k, D] += dS^T [64k, M] . Q [M, D]     SS, dS^T from shared memory, Q read MN-major
//   dQ [M, D/2]    = dS [M, N] . K [N, D/2]       SS, dS stored M-major by the transposed writes
//
// D = 256 ("split D", kBlockN = 64): dK and dV of 64 keys x 256 would need 256 registers per
// thread, so warpgroup w owns head-dim columns [128w, 128w + 128) of dK, dV and dQ, and query
// columns [32w, 32w + 32) of S^T and dP^T; P^T reaches dV through shared memory like dS^T:
//   S^T [64k, M/2]  = K [64k, D] . Q_w^T          SS
//   dV [64k, D/2]  += P^T [64k, M] . dO [M, D/2]  SS, P^T from shared memory
//   dK [64k, D/2]  += dS^T [64k, M] . Q [M, D/2]  SS
//   dQ [M, D/2]     = dS [M, 64k] . K [64k, D/2]  SS
// Q and dO are single-buffered and dQ has one staging buffer, to fit in shared memory.
#pragma once
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "src/cuda/attention/bwd_args.hpp"

namespace attnkit::cuda::attn {

using namespace cute;

template <class Element_, int kHeadDim_>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kSplitD = kHeadDim > 128;  // see above
  static constexpr int kBlockM = kBwdBlockM;       // query rows per streamed tile
  static constexpr int kBlockN = bwd_block_n(kHeadDim);  // keys per CTA
  static constexpr int kStages = kSplitD ? 1 : 2;     // Q and dO pipeline depth
  static constexpr int kDqBuffers = kSplitD ? 1 : 2;  // dQ staging buffers
  // The default mode's dQ adds into a zeroed dq_accum come from the consumers' registers
  // (AttnBwdArgs::dq_direct, dq_direct_adds): D64 5-6% faster, D128 1.5-2.5%. The tile's address:
  // D64 keeps the head's dq_accum base across the query tiles, D128 (consumers at their register
  // limit) recomputes it per tile — the other way round each lost 3-4%. docs/perf/attention_bwd.md,
  // "dQ added by the consumers".
  static constexpr bool kDqDirect = dq_direct_adds(kHeadDim);
  static_assert(!(kDqDirect && kSplitD), "the split-D kernel hands dQ to the writer warp");
  static constexpr bool kDqDirectKeepsHead = kHeadDim == 64;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kProducerRegs = 24;  // 128 * producer + 256 * consumer <= 64512
  static constexpr int kConsumerRegs = 240;

  // Two atoms per product, one per consumer warpgroup: stacked along M (keys) when the warpgroups
  // split the keys, side by side along N (queries, or head dims) when they split D.
  using WgSplit = std::conditional_t<kSplitD, Layout<Shape<_1, _2, _1>>, Layout<Shape<_2, _1, _1>>>;
  // S^T and dP^T [64k per atom, M or M/2].
  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kSplitD ? kBlockM / 2 : kBlockM>, Int<kHeadDim>>>(), WgSplit{}));
  // dK, dV [64k, D or D/2 per atom]; dO and Q are read MN-major. dV takes P^T from registers when
  // the warpgroup holds all of its queries (RS), else from shared memory; dK takes dS^T from shared
  // memory (it is stored there for dQ anyway, and keeping it in registers too would cost 16 of them
  // at the kernel's register peak).
  using ShapedKV = Shape<_64, Int<kSplitD ? kHeadDim / 2 : kHeadDim>, Int<kBlockM>>;
  using TiledMmadV = decltype(make_tiled_mma(
      std::conditional_t<kSplitD, decltype(GMMA::ss_op_selector<Element, Element, float, ShapedKV, GMMA::Major::K, GMMA::Major::MN>()),
                         decltype(GMMA::rs_op_selector<Element, Element, float, ShapedKV, GMMA::Major::K, GMMA::Major::MN>())>{},
      WgSplit{}));
  using TiledMmadK = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, ShapedKV, GMMA::Major::K, GMMA::Major::MN>(), WgSplit{}));
  // dQ: two atoms side by side along N (head-dim halves), both operands MN-major.
  using TiledMmadQ = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kHeadDim / 2>, Int<kBlockN>>,
                                                                  GMMA::Major::MN, GMMA::Major::MN>(),
                                             Layout<Shape<_1, _2, _1>>{}));
  // Where a consumer warpgroup's S^T fragment sits in the [N, M] tile, and its 64 keys of dK / dV.
  CUTE_HOST_DEVICE static constexpr int wg_key0(int wg) { return kSplitD ? 0 : 64 * wg; }
  CUTE_HOST_DEVICE static constexpr int wg_query0(int wg) { return kSplitD ? wg * kBlockM / 2 : 0; }
  static constexpr int kWgQueries = kSplitD ? kBlockM / 2 : kBlockM;

  // sQ, sdO [M, D, stage] and sK, sV [N, D]: K-major (D contiguous), swizzled.
  using SmemLayoutAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kBlockM>, Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  using SmemLayoutAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kBlockN>, Int<kHeadDim>>());
  using SmemLayoutK = decltype(tile_to_shape(SmemLayoutAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  // Transposed views of the same bytes: Qt(d, m, s) = Q(m, d, s), Kt(d, n) = K(n, d).
  using SmemLayoutQt = decltype(composition(SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                                                       Stride<Int<kBlockM>, _1, Int<kBlockM * kHeadDim>>{})));
  using SmemLayoutKt = decltype(composition(SmemLayoutK{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, Stride<Int<kBlockN>, _1>{})));
  // sdS [M, N] M-major (the A operand of dQ); written through its transpose dSt(n, m) = dS(m, n).
  using SmemLayoutAtomdS = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::MN, Element, Int<kBlockM>, Int<kBlockN>>());
  using SmemLayoutdS = decltype(tile_to_shape(SmemLayoutAtomdS{}, Shape<Int<kBlockM>, Int<kBlockN>>{}, Step<_2, _1>{}));
  using SmemLayoutdSt = decltype(composition(SmemLayoutdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, Stride<Int<kBlockM>, _1>{})));

  // Global views for TMA: (seq, d, head, batch), D contiguous.
  using ShapeQKV = Shape<int32_t, int32_t, int32_t, int32_t>;
  using StrideQKV = Stride<int64_t, _1, int64_t, int64_t>;
  using GmemTensor = decltype(make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideQKV{}));
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, take<0, 2>(SmemLayoutQ{}), Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, GmemTensor{}, SmemLayoutK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  static constexpr uint32_t kRowBytes = kBlockM * sizeof(float);  // one tile's lse2 or delta
  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element) + kRowBytes;
  static constexpr uint32_t kTmaBytesKV = 2 * kBlockN * kHeadDim * sizeof(Element);
  static constexpr int kDqFloats = kBlockM * kHeadDim;  // one query tile's dQ partial

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ>, 1024> dout;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> v;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutdS>, 1024> ds;
    cute::array_aligned<Element, kSplitD ? cute::cosize_v<SmemLayoutdS> : 8, 1024> pt;  // P^T (split D only), as dS
    cute::array_aligned<float, kDqBuffers * kDqFloats, 128> dq;  // staging for the bulk reduce-add, MMA order
    cute::array_aligned<float, kBlockM * kStages, 16> lse2;
    cute::array_aligned<float, kBlockM * kStages, 16> delta;
    typename Pipeline::SharedStorage pipeline_q;   // Q + lse2
    typename Pipeline::SharedStorage pipeline_do;  // dO + delta
    // K landed, V landed (once per CTA each): the first S^T GEMM needs K only, so it starts while V
    // still lands (one barrier for both: the consumers' first wait was 1.8% of D128 S2k's samples).
    cutlass::arch::ClusterTransactionBarrier barrier_kv[2];
    int loads_issued;  // the last query tile whose Q and dO loads the producer has issued (bwd_dq_writer.cuh)
    int32_t variant_ids[kBlockN + 2 * kBlockM];  // the Probs variant's (flex: document ids of the keys, each warpgroup's rows)
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");
};

template <class Traits, class Variant>
struct BwdParams {
  typename Traits::TmaQ tma_q, tma_do;
  typename Traits::TmaK tma_k, tma_v;
  typename Traits::ShapeQKV shape_q, shape_k;
  AttnBwdArgs args;
  typename Variant::Args extra;  // the variant's own parameters (bwd_variant.cuh)
};

}  // namespace attnkit::cuda::attn
