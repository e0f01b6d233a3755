// src/cuda/gdn/bwd_dhu_kernel.cuh — the reverse state-gradient kernel ("bwd_dhu") and its launch
// for one (element type, key head dim, value block).
//
// One CTA per (sequence, value head, BV value columns): the columns of dH evolve independently
// (every product contracts over keys or rows, never over values), so value blocks need no
// communication. Warpgroup 0 streams the chunks from the last (bwd_dhu_load.cuh), warpgroup 1
// carries dH (bwd_dhu_state.cuh); they meet at the stages' "full" / "empty" named barriers.
#pragma once
#include <cuda_runtime.h>

#include "src/cuda/gdn/bwd_dhu_load.cuh"
#include "src/cuda/gdn/bwd_dhu_state.cuh"
#include "src/cuda/smem_optin.cuh"

namespace attnkit::cuda::gdn {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) gdn_bwd_dhu_kernel(CUTE_GRID_CONSTANT const BwdDhuArgs a) {
  const WorkItem it(a, blockIdx.x);
  if (threadIdx.x < 128) {
    if (it.nchunks > 0) DhuLoadWarpgroup<T>{a, it, static_cast<int>(threadIdx.x)}.run();
  } else {
    DhuStateWarpgroup<T>{a, it, static_cast<int>(threadIdx.x) - 128}.run();
  }
}

template <class Element, int kDK, int kBV>
cudaError_t launch_gdn_bwd_dhu(const BwdDhuArgs& a, cudaStream_t stream) {
  using T = BwdDhuTraits<Element, kDK, kBV>;
  const int64_t items = int64_t(a.num_seqs) * a.HV * a.v_blocks;
  if (items == 0) return cudaSuccess;
  if (items > INT32_MAX) return cudaErrorInvalidValue;
  const cudaError_t ok = ensure_dynamic_smem<gdn_bwd_dhu_kernel<T>>(T::kSmemBytes);
  if (ok != cudaSuccess) return ok;
  gdn_bwd_dhu_kernel<T><<<static_cast<unsigned>(items), T::kThreads, T::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace attnkit::cuda::gdn
