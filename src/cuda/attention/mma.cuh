// src/cuda/attention/mma.cuh — issuing one warpgroup GEMM (a sequence of WGMMAs over the k-blocks)
// without waiting for it; the caller waits with warpgroup_wait<N>() where the overlap ends.
// The GDN chunked forward (src/cuda/gdn) uses the same helpers.
#pragma once
#include <cute/tensor.hpp>

namespace attnkit::cuda::attn {

using namespace cute;

// C = A . B with A from registers (kRegisterA) or shared memory; C's old contents are ignored.
template <bool kRegisterA, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void gemm_zero(TiledMma& mma, TA& a, TB const& b, TC& c) {
  if constexpr (kRegisterA) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = GMMA::ScaleOut::Zero;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) {
    cute::gemm(mma, a(_, _, k), b(_, _, k), c);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
}

// C = A . B with both operands in shared memory (descriptors).
template <class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void gemm_ss_zero(TiledMma& mma, TA const& a, TB const& b, TC& c) {
  gemm_zero<false>(mma, a, b, c);
}

// C += A . B with B in shared memory and A in registers (kRegisterA, fenced like C) or shared memory.
template <bool kRegisterA, class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void gemm_accumulate(TiledMma& mma, TA& a, TB const& b, TC& c) {
  if constexpr (kRegisterA) warpgroup_fence_operand(a);
  warpgroup_fence_operand(c);
  warpgroup_arrive();
  mma.accumulate_ = GMMA::ScaleOut::One;
  CUTE_UNROLL
  for (int k = 0; k < size<2>(a); ++k) cute::gemm(mma, a(_, _, k), b(_, _, k), c);
  warpgroup_commit_batch();
  warpgroup_fence_operand(c);
}

template <class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void gemm_rs(TiledMma& mma, TA& a, TB const& b, TC& c) {
  gemm_accumulate<true>(mma, a, b, c);
}

template <class TiledMma, class TA, class TB, class TC>
CUTE_DEVICE void gemm_ss(TiledMma& mma, TA& a, TB const& b, TC& c) {
  gemm_accumulate<false>(mma, a, b, c);
}

}  // namespace attnkit::cuda::attn
