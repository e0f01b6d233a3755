// src/cuda/attention/fwd_traits.cuh — compile-time shape of the forward kernel for one
// (element type, head dim): tiles, warp roles, swizzled shared-memory layouts, TMA and WGMMA types.
//
// A CTA owns a 128-row query tile. Warpgroup 0 is the producer (one thread issues TMA); warpgroups
// 1 and 2 are consumers, each computing 64 query rows against every key tile:
//   S[64, BN]  = Q[64, D] . K[BN, D]^T     WGMMA, both operands in shared memory (SS)
//   O[64, D]  += P[64, BN] . V[BN, D]      WGMMA, P from registers (RS), V^T read MN-major
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/gemm/collective/builders/sm90_common.inl>
#include <cutlass/pipeline/sm90_pipeline.hpp>

#include "src/cuda/attention/fwd_args.hpp"

namespace attnkit::cuda::attn {

using namespace cute;

template <class Element_, int kHeadDim_>
struct FwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 128;  // query rows per CTA (64 per consumer warpgroup)
  static constexpr int kBlockN = kHeadDim <= 64 ? 128 : (kHeadDim <= 128 ? 128 : 64);  // keys per tile
  // K and V pipeline depth, and Q buffers (with two, the next tile's Q loads while the current
  // tile's last key tiles run). Deeper K/V prefetch hides the load latency at tile boundaries;
  // shared memory (227 KB) decides: D64 3 + 2, D128 3 + 1 (224 KB), D256 2 + 1.
  static constexpr int kStages = kHeadDim <= 128 ? 3 : 2;
  static constexpr int kQStages = kHeadDim <= 64 ? 2 : 1;
  static constexpr int kConsumerWGs = kBlockM / 64;
  static constexpr int kScratchFloats = 64 + kBlockN;  // flex: a 64-row x kBlockN-column tile's diagonals
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kProducerRegs = 40;  // 128 * producer + 256 * consumer <= 64512
  static constexpr int kConsumerRegs = 232;

  using TileShapeQK = Shape<Int<kBlockM>, Int<kBlockN>, Int<kHeadDim>>;  // (M, N, K) of Q.K^T
  using TileShapePV = Shape<Int<kBlockM>, Int<kHeadDim>, Int<kBlockN>>;  // (M, N, K) of P.V

  // One 64-row WGMMA atom per consumer warpgroup, stacked along M.
  using AtomLayout = Layout<Shape<Int<kConsumerWGs>, _1, _1>>;
  using TiledMmaQK = decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, TileShapeQK>(), AtomLayout{}));
  using TiledMmaPV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, TileShapePV, GMMA::Major::K, GMMA::Major::MN>(), AtomLayout{}));

  // sQ [M, D] and sK [N, D, stage]: K-major (D contiguous), swizzled for WGMMA.
  using SmemLayoutAtomQ = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kBlockM>, Int<kHeadDim>>());
  using SmemLayoutQ = decltype(tile_to_shape(SmemLayoutAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutAtomK = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, Element, Int<kBlockN>, Int<kHeadDim>>());
  using SmemLayoutK = decltype(tile_to_shape(SmemLayoutAtomK{}, Shape<Int<kBlockN>, Int<kHeadDim>, Int<kStages>>{}));
  // sVt [D, N, stage]: V^T with D contiguous (MN-major), as TMA writes V rows and P.V reads it.
  using SmemLayoutAtomVt = decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::MN, Element, Int<kHeadDim>, Int<kBlockN>>());
  using SmemLayoutVt = decltype(tile_to_shape(SmemLayoutAtomVt{}, Shape<Int<kHeadDim>, Int<kBlockN>, Int<kStages>>{}, Step<_2, _1, _3>{}));

  // Global views for TMA: (seq, d, head, batch) for Q/K and (d, seq, head, batch) for V^T.
  using ShapeQKV = Shape<int32_t, int32_t, int32_t, int32_t>;
  using StrideQK = Stride<int64_t, _1, int64_t, int64_t>;
  using StrideVt = Stride<_1, int64_t, int64_t, int64_t>;
  using TmaQ = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideQK{}),
                                      SmemLayoutQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}, _1{}));
  using TmaK = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideQK{}),
                                      take<0, 2>(SmemLayoutK{}), Shape<Int<kBlockN>, Int<kHeadDim>>{}, _1{}));
  using TmaV = decltype(make_tma_copy(SM90_TMA_LOAD{}, make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeQKV{}, StrideVt{}),
                                      take<0, 2>(SmemLayoutVt{}), Shape<Int<kHeadDim>, Int<kBlockN>>{}, _1{}));
  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);

  using Pipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;

  struct SharedStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQ> * kQStages, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>, 1024> v;
    typename Pipeline::SharedStorage pipeline_k;
    typename Pipeline::SharedStorage pipeline_v;
    cutlass::arch::ClusterTransactionBarrier barrier_q_full[kQStages];  // Q landed (TMA transaction bytes)
    cutlass::arch::ClusterBarrier barrier_q_empty[kQStages];            // consumers no longer read Q
    int tile[kQStages];  // the tile whose Q is (being) loaded there; >= num_tiles: no more work
    // The producer's description (Variant::Tile's Shared part, where it has one) of the CTA's
    // j-th tile, in slot j % (kQStages + 1): the consumers copy it instead of deriving it again
    // (integer divisions, sequence lookups). One slot more than Q buffers, so a tile's slot is
    // rewritten only once its epilogue is done.
    alignas(16) unsigned char tile_desc[kQStages + 1][128];
    float scratch[kConsumerWGs][kScratchFloats];  // per consumer warpgroup, for its Variant's Scores
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA");

  // Q buffer `buf` as a [M, D] swizzled tensor.
  static CUTE_DEVICE auto smem_q(SharedStorage& s, int buf) {
    return make_tensor(make_smem_ptr(s.q.data() + buf * cute::cosize_v<SmemLayoutQ>), SmemLayoutQ{});
  }
};

// The kernel's parameter block: TMA descriptors over the caller's tensors, the plain args, and
// what the variant (fwd_variant.cuh) adds.
template <class Traits, class Variant>
struct FwdParams {
  typename Traits::TmaQ tma_q;
  typename Traits::TmaK tma_k;
  typename Traits::TmaV tma_v;
  typename Traits::ShapeQKV shape_q, shape_k, shape_vt;
  AttnFwdArgs args;
  typename Variant::Args extra;
};

}  // namespace attnkit::cuda::attn
